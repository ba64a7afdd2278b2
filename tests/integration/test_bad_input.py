"""Bad input never gives a 500: every write endpoint of the URL conf — operator API, runtime
API and pages — answers malformed, mistyped, oversized and absurdly nested bodies with a
4xx (in the API error shape for the API), as the most privileged caller, so nothing is
refused for lack of a permission before the body is even read."""

from __future__ import annotations

import pytest
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart
from django.urls import reverse

from tests.factories import (
    OTHER_AGENT,
    SAMPLE_AGENT,
    STRATEGY_KEY,
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    TraceFactory,
    frozen_version,
    manifest_body,
    profile_body,
    publish,
    runtime_token,
    strategy_body,
    user_with_grants,
)
from tests.integration.test_access_matrix import endpoints, sample_kwargs
from tests.rollback import rolled_back

WRITE_METHODS = ["POST", "PUT", "PATCH"]
RUNTIME_PREFIX = "/api/v1/runtime/"

BAD_JSON_BODIES = {
    "not json": b"this is not json",
    "truncated": b'{"body": {"required": [',
    "a list": b"[1, 2, 3]",
    "a string": b'"hello"',
    "empty object": b"{}",
    "wrong types": (
        b'{"body": "x", "revision": "abc", "reason": 5, "note": [], "capabilities": "all",'
        b' "traces": {"a": 1}, "environment": 7, "kind": null, "name": {}, "url": 3}'
    ),
    "deep nesting": b'{"body": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
    "huge string": b'{"reason": "' + b"x" * (3 * 1024 * 1024) + b'"}',
}
BAD_FORMS = {
    "empty form": {},
    "garbage fields": {
        "reason": "",
        "revision": "not-a-number",
        "body": "{not json",
        "environment": "no-such-env",
        "version": "-1",
        "capabilities": ["nope"],
        "agent": "assistant_lite",
    },
}


@pytest.fixture
def callers(db):
    """An admin of all agents and a runtime token for sg-test with every capability, and
    something behind every kind of URL kwarg: the sample agent's profile and strategy (v1
    each; the strategy live in sg-test and waiting for approval in prod, requested by ops),
    the other agent, a trace req-92, roles, grants and audit rows."""
    agent = AgentFactory(key=SAMPLE_AGENT)
    AgentFactory(key=OTHER_AGENT)
    sg_test = EnvironmentFactory(key="sg-test", position=1, manifest=manifest_body())
    prod = EnvironmentFactory(key="prod", position=2, protected=True, manifest=manifest_body())
    ops = user_with_grants("ops", operator=agent)
    admin = user_with_grants("bad_input_admin", admin=None)
    frozen_version(DocumentFactory(agent=agent, profile=True), profile_body(), actor=ops)
    strategy = frozen_version(
        DocumentFactory(agent=agent, key=STRATEGY_KEY), strategy_body(), actor=ops
    )
    publish(strategy, sg_test, actor=ops)
    publish(strategy, prod, actor=ops)  # an approval someone else may decide
    TraceFactory(request_id="req-92", agent=agent, environment=sg_test)
    return admin, runtime_token(sg_test)


# GET-only documents rendered as OpenAPI/HTML: they read no body.
NO_BODY = {"schema", "swagger-ui"}


def _write_endpoints():
    for endpoint in endpoints():
        if endpoint.name is None or endpoint.name in NO_BODY:
            continue
        yield endpoint


def _send(client, method, path, body, *, content_type, headers=None):
    with rolled_back():
        response = client.generic(method, path, body, content_type=content_type, **(headers or {}))
    return response


def test_bad_input__every_write_endpoint__4xx_never_500(client, callers):
    admin, secret = callers
    client.force_login(admin)
    token_header = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    checked, failures = 0, []
    for endpoint in _write_endpoints():
        path = reverse(endpoint.name, kwargs=sample_kwargs(endpoint))
        is_api = path.startswith("/api/")
        headers = token_header if path.startswith(RUNTIME_PREFIX) else {}
        for method in WRITE_METHODS:
            probe = _send(
                client, method, path, b"{}", content_type="application/json", headers=headers
            )
            if probe.status_code == 405:
                continue
            cases = BAD_JSON_BODIES.items() if is_api else BAD_FORMS.items()
            for label, body in cases:
                if is_api:
                    response = _send(
                        client, method, path, body, content_type="application/json", headers=headers
                    )
                else:
                    response = _send(
                        client,
                        method,
                        path,
                        encode_multipart(BOUNDARY, body),
                        content_type=MULTIPART_CONTENT,
                    )
                checked += 1
                if response.status_code >= 500:
                    failures.append(f"{method} {path} [{label}] → {response.status_code}")
                elif is_api and response.status_code >= 400:
                    is_json = response.headers.get("Content-Type", "").startswith(
                        "application/json"
                    )
                    payload = response.json() if is_json else {}
                    if not {"code", "message"} <= set(payload.get("error", {})):
                        failures.append(
                            f"{method} {path} [{label}] → error not in the shared shape: {payload}"
                        )
    assert checked > 50, "the walk found too few write endpoints to mean anything"
    assert failures == [], "\n".join(failures)

"""Issue 13's automation journey: a script holding only personal API tokens, over HTTP
against a live console — create a strategy with its first draft, freeze it, publish it to
sg-test, request prod, and (with another person's token) approve. The audit log names both
people and both tokens, and the runtime then reads the new version in prod."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from console.accounts.personal_tokens import personal_token_create, personal_token_revoke
from console.kernel.models import AuditRecord
from tests.factories import AgentFactory, grant, release_setup, runtime_token, strategy_body

AGENT = "assistant_professional"
NEW_STRATEGY = "returns_handling"


class Script:
    """What a CI job does: JSON over HTTP with `Authorization: Bearer <personal token>`."""

    def __init__(self, base_url: str, token: str):
        self.base_url, self.token = base_url.rstrip("/"), token

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(
            self.base_url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


@pytest.fixture
def tokens(transactional_db):
    w = release_setup()
    ops_token, ops_secret = personal_token_create(
        user=w.ops,
        name="ci-publish",
        capabilities=["view_config", "edit_drafts", "publish", "request_protected_publish"],
        all_agents=False,
        agents=[AGENT],
    )
    ops2_token, ops2_secret = personal_token_create(
        user=w.ops2, name="review-bot", capabilities=["view_config", "approve"], all_agents=True
    )
    return w, (ops_token, ops_secret), (ops2_token, ops2_secret)


def test_script_with_personal_tokens__draft_freeze_publish_request_approve__audit_names_both(
    live_server, tokens
):
    w, (ops_token, ops_secret), (ops2_token, ops2_secret) = tokens
    ops, reviewer = Script(live_server.url, ops_secret), Script(live_server.url, ops2_secret)
    documents = f"/api/v1/agents/{AGENT}/documents/"
    doc = f"{documents}{NEW_STRATEGY}/"
    before = AuditRecord.objects.order_by("-id").values_list("id", flat=True).first() or 0

    status, created = ops.call(
        "POST", documents, {"key": NEW_STRATEGY, "body": strategy_body(), "note": "first cut"}
    )
    assert status == 201, created
    assert created["draft"]["state"] == "draft"

    status, frozen = ops.call("POST", doc + "draft/freeze/", {"note": "ready for sg-test"})
    assert status == 200, frozen
    number = frozen["number"]

    status, published = ops.call(
        "POST", doc + "releases/sg-test/", {"version": number, "reason": "first rollout"}
    )
    assert status == 200, published
    assert published["release"]["version"] == number

    status, requested = ops.call(
        "POST", doc + "releases/prod/", {"version": number, "reason": "sg-test looked good"}
    )
    assert status == 202, requested  # prod is protected: a request for a second person
    approval = requested["approval"]
    assert approval["status"] == "pending" and approval["requested_by"] == "ops"

    # The requester's token cannot approve its own request (and lacks the capability).
    status, refused = ops.call("POST", f"/api/v1/approvals/{approval['id']}/approve/", {})
    assert status == 403, refused

    status, approved = reviewer.call(
        "POST", f"/api/v1/approvals/{approval['id']}/approve/", {"note": "checked the diff"}
    )
    assert status == 200, approved

    # The audit log names each person and the token each one used.
    rows = AuditRecord.objects.filter(id__gt=before, agent_key=AGENT, action__in=ACTIONS)
    seen = {(r.action, r.actor_label, r.actor_token_label) for r in rows}
    assert ("document.create", "ops", "ci-publish") in seen
    assert ("version.freeze", "ops", "ci-publish") in seen
    assert ("approval.request", "ops", "ci-publish") in seen
    assert ("release.approve", "ops2", "review-bot") in seen
    assert {r.actor_token_id for r in rows if r.actor_label == "ops"} == {str(ops_token.pk)}
    assert {r.actor_token_id for r in rows if r.actor_label == "ops2"} == {str(ops2_token.pk)}

    # And the runtime in prod now serves it.
    runtime = Script(live_server.url, runtime_token(w.envs["prod"]))
    status, config = runtime.call("GET", f"/api/v1/runtime/config/{AGENT}")
    assert status == 200
    assert config["strategies"][NEW_STRATEGY]["version"] == number


ACTIONS = ("document.create", "version.freeze", "approval.request", "release.approve")


def test_script__token_scope_and_state__refused_in_the_error_shape(live_server, tokens):
    """The same script with a token that does not cover the object, or no longer works."""
    w, (ops_token, ops_secret), (ops2_token, ops2_secret) = tokens
    reviewer = Script(live_server.url, ops2_secret)
    # No edit_drafts in the reviewer's token: refused, nothing created.
    status, body = reviewer.call(
        "POST", f"/api/v1/agents/{AGENT}/documents/", {"key": "nope", "body": strategy_body()}
    )
    assert status == 403 and body["error"]["code"]
    # ops's token is scoped to one agent: another agent ops may edit is not there at all.
    grant(w.ops, "operator", AgentFactory(key="assistant_lite"))
    status, body = Script(live_server.url, ops_secret).call(
        "GET", "/api/v1/agents/assistant_lite/documents/"
    )
    assert status == 404, body
    personal_token_revoke(token=ops_token, actor=w.ops)
    status, body = Script(live_server.url, ops_secret).call("GET", "/api/v1/agents/")
    assert status == 401 and body["error"]["code"]

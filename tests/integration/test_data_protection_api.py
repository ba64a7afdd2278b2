"""Data protection through the operator API and the ingest (docs/data-protection.md): rules
added and removed by admins only, audited; a rule that does not compile, is too slow or would
match everything is refused with 400 and nothing saved; the rules fail closed; erasure by API
and by command, with a downloadable receipt."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from console.kernel.models import AuditRecord
from tests.factories import post_batch, runtime_token, trace_payload, user_with_grants, world
from tests.factories.outcomes import outcome_kinds, post_outcomes
from traces.models import Erasure, RedactionRule, Trace
from traces.outcomes.models import Outcome

pytestmark = pytest.mark.django_db

RULES = "/api/v1/environments/sg-test/redaction-rules"


@pytest.fixture
def sg():
    env = world()["environments"]["sg-test"]
    outcome_kinds(env)
    return env


@pytest.fixture
def admin(client):
    user = user_with_grants(admin=None)
    client.force_login(user)
    return user


def add(client, **body):
    return client.post(RULES, data=body, content_type="application/json")


def test_rules__admin_adds_and_removes__audited__ingest_redacts(client, sg, admin):
    assert add(client, detector="card").status_code == 201
    response = add(client, detector="custom", key="cust", pattern=r"CUST-\d{6}", action="refuse")
    assert response.status_code == 201, response.content
    assert [r["key"] for r in client.get(RULES).json()] == ["card", "cust"]
    assert AuditRecord.objects.filter(action="redaction_rule.create").count() == 2

    preview = client.post(
        RULES + "/preview",
        data={"text": "card 4111 1111 1111 1111"},
        content_type="application/json",
    ).json()
    assert preview == {"text": "card [redacted:card]", "counts": {"card": 1}, "refused": None}

    secret = runtime_token(sg)
    card = trace_payload("req-1", model={"name": "4111-1111-1111-1111"})
    refused = trace_payload(
        "req-2",
        candidates=[{"id": "x", "source": "s", "decision": "selected", "note": "for CUST-123456"}],
    )
    body = post_batch(client, secret, [card, refused]).json()
    assert body["accepted"] == 1
    assert body["rejected"][0]["errors"][0] == {
        "path": "candidates[0].note",
        "code": "personal_data",
        "message": "holds personal data matching rule 'cust' (custom); the environment refuses it",
        "severity": "error",
    }
    stored = Trace.objects.get(request_id="req-1")
    assert (stored.model_name, stored.redactions) == ("[redacted:card]", {"card": 1})
    assert client.get("/api/v1/traces/req-1").json()["redactions"] == {"card": 1}
    assert "trace-redactions" in client.get("/traces/req-1/").content.decode()

    assert client.delete(RULES + "/cust").status_code == 204
    assert AuditRecord.objects.filter(action="redaction_rule.delete").count() == 1
    assert post_batch(client, secret, [refused]).json()["accepted"] == 1


@pytest.mark.parametrize(
    ("body", "path", "says"),
    [
        (
            {"detector": "custom", "key": "c", "pattern": "CUST-(\\d{6}"},
            "pattern",
            "does not compile",
        ),
        ({"detector": "custom", "key": "c", "pattern": ".*"}, "pattern", "empty string"),
        ({"detector": "custom", "key": "c", "pattern": "[a-z]+"}, "pattern", "ordinary text"),
        ({"detector": "custom", "key": "c", "pattern": "(a+)+$"}, "pattern", "too slow"),
        ({"detector": "custom", "key": "preview", "pattern": "Q\\d{9}"}, "key", "reserved"),
        ({"detector": "card", "pattern": "x"}, "pattern", "Only a custom rule"),
    ],
)
def test_bad_rule__400_with_the_reason__nothing_saved(client, sg, admin, body, path, says):
    response = add(client, **body)
    assert response.status_code == 400, response.content
    detail = response.json()["error"]["details"][0]
    assert detail["path"] == path and says in detail["message"]
    assert not RedactionRule.objects.exists()
    assert not AuditRecord.objects.filter(action="redaction_rule.create").exists()


def test_rules_and_erasures__admins_only(client, sg):
    client.force_login(user_with_grants(operator=None))
    assert client.get(RULES).status_code == 403
    assert add(client, detector="card").status_code == 403
    assert (
        client.post(
            "/api/v1/erasures",
            data={"principal": "p", "reference": "r"},
            content_type="application/json",
        ).status_code
        == 403
    )
    assert not RedactionRule.objects.exists()


def test_fail_closed__rules_unreadable__batch_refused_503__nothing_stored(client, sg):
    # A rule the checks would refuse, saved around them (an older console, a manual edit).
    RedactionRule.objects.create(environment=sg, key="bad", detector="custom", pattern="(")
    secret = runtime_token(sg)
    response = post_batch(client, secret, [trace_payload("req-1")])
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "redaction_unavailable"
    assert response["Retry-After"]
    outcomes = post_outcomes(
        client, secret, [{"request_id": "req-1", "kind": "escalated", "value": True}]
    )
    assert outcomes.status_code == 503
    assert not Trace.objects.exists() and not Outcome.objects.exists()


def test_erasure__api_receipt_download__command(client, sg, admin, tmp_path):
    secret = runtime_token(sg)
    traces = [trace_payload(f"req-{i}", principal="p-1" if i < 2 else "p-2") for i in range(4)]
    assert post_batch(client, secret, traces).json()["accepted"] == 4

    missing = client.post(
        "/api/v1/erasures", data={"principal": "p-1"}, content_type="application/json"
    )
    assert missing.status_code == 400
    unknown = client.post(
        "/api/v1/erasures",
        data={"principal": "nobody", "reference": "DPO-1"},
        content_type="application/json",
    )
    assert unknown.status_code == 404 and not Erasure.objects.exists()

    response = client.post(
        "/api/v1/erasures",
        data={"principal": "p-1", "reference": "DPO-1"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    receipt = response.json()
    assert receipt["counts"]["traces_trace"] == 2 and receipt["reference"] == "DPO-1"
    download = client.get(f"/api/v1/erasures/{receipt['erasure']}")
    assert "attachment" in download["Content-Disposition"]
    assert json.loads(download.content) == receipt
    assert not Trace.objects.filter(principal="p-1").exists()

    out = tmp_path / "receipt.json"
    call_command(
        "erase_principal",
        principal="p-2",
        reference="DPO-2",
        username=admin.username,
        receipt=str(out),
    )
    assert json.loads(out.read_text())["counts"]["traces_trace"] == 2
    assert not Trace.objects.exists()
    assert AuditRecord.objects.filter(action="principal.erase").count() == 2


def test_runtime_reports__name_redacted__instance_refused__fail_closed(client, sg):
    """What a runtime says about itself (heartbeat, manifest) passes the same rules: its name
    is free text (redacted), its instance an identifier (refused), and unreadable rules
    refuse the report (503)."""
    from strategies.catalog.models import Manifest
    from strategies.runtime.models import RuntimeInstance
    from tests.factories import manifest_body

    RedactionRule.objects.create(environment=sg, key="email", detector="email")
    secret = runtime_token(sg)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}

    def beat(instance="host-7:4242", runtime="bank-assistant by ops@example.com"):
        body = {
            "instance": instance,
            "sdk_version": "0.2.0",
            "runtime": runtime,
            "transport": "poll",
            "agents": {
                "assistant_professional": {"etag": '"r1"', "documents": {}, "resolution": "fresh"}
            },
        }
        return client.post(
            "/api/v1/runtime/heartbeat",
            data=json.dumps(body),
            content_type="application/json",
            **auth,
        )

    assert beat().status_code == 200
    assert RuntimeInstance.objects.get().runtime == "bank-assistant by [redacted:email]"
    refused = beat(instance="ops@example.com")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"][0]["path"] == "instance"
    assert refused.json()["error"]["code"] == "personal_data"

    manifest = {**manifest_body(), "runtime": "bank-assistant, ask ops@example.com"}
    response = client.put(
        "/api/v1/runtime/manifest",
        data=json.dumps(manifest),
        content_type="application/json",
        HTTP_X_RUNTIME_INSTANCE="host-7:1",
        **auth,
    )
    assert response.status_code == 200, response.content
    assert Manifest.objects.filter(environment=sg).latest("version").runtime == (
        "bank-assistant, ask [redacted:email]"
    )
    named = client.put(
        "/api/v1/runtime/manifest",
        data=json.dumps(manifest),
        content_type="application/json",
        HTTP_X_RUNTIME_INSTANCE="ops@example.com",
        **auth,
    )
    assert named.status_code == 400

    RedactionRule.objects.create(environment=sg, key="bad", detector="custom", pattern="(")
    assert beat().status_code == 503
    assert RuntimeInstance.objects.count() == 1

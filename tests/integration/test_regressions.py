"""Regression sets (issue 35, item 1 and the check of item 2): the API keeps a demo request
with its expectations and a ticket note, refuses bad input at its field with nothing saved,
checks bodies, versions and configuration files, outlives the trace's retention, drops members
past the set's own, and the management command writes JUnit XML naming the failing member and
expectation."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from xml.etree import ElementTree as ET

import pytest
from django.core.management import call_command
from django.utils import timezone

from console.kernel.models import AccessLogEntry, AuditRecord
from strategies.documents.models import Version
from strategies.exchange import selectors as exchange_selectors
from traces.models import Trace
from traces.regressions import services
from traces.regressions.models import Member, RegressionSet

pytestmark = pytest.mark.django_db

AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
SETS = f"/api/v1/agents/{AGENT}/regression-sets"
POLICY_KEPT = {"kind": "item_selected", "item": "P7"}


@pytest.fixture
def support(demo_world, make_user):
    return make_user("sup", support=AGENT)


def _new_set(client, **extra) -> dict:
    body = {
        "name": "policy cuts",
        "strategy": STRATEGY,
        "keep_reason": "Incident reviews (INC process)",
        "retention_days": 400,
        **extra,
    }
    response = client.post(SETS, body, content_type="application/json")
    assert response.status_code == 201, response.json()
    return response.json()


def _add(client, set_id, expectations=(POLICY_KEPT,), request_id="req-92", note="TICKET-1"):
    return client.post(
        f"{SETS}/{set_id}/members",
        {"request_id": request_id, "expectations": list(expectations), "note": note},
        content_type="application/json",
    )


def _check(client, **body):
    return client.post(
        f"/api/v1/agents/{AGENT}/regression-check", body, content_type="application/json"
    )


def test_api__support_keeps_req92_with_an_expectation__audited_and_checked(client, support):
    # Given support with a new set
    client.force_login(support)
    created = _new_set(client)
    # When they keep req-92 with "P7 must be selected" and a ticket
    response = _add(client, created["id"])
    # Then it is kept with what a replay needs, never a body, and audited
    assert response.status_code == 201, response.json()
    member = Member.objects.get()
    assert member.snapshot["candidates"] and member.snapshot["selection"]["engine"]
    assert "body" not in json.dumps(member.snapshot)
    assert member.expires_at - member.added_at == timedelta(days=400)
    actions = list(AuditRecord.objects.values_list("action", flat=True).order_by("id"))
    assert actions[-2:] == ["regression_set.create", "regression_member.add"]
    # And v3 (recorded) passes, v1 (which does not read the policy) fails side by side
    passed = _check(client, strategy=STRATEGY, version=3).json()
    assert passed["outcome"] == "passed"
    failed = _check(client, strategy=STRATEGY, version=1).json()
    assert failed["outcome"] == "failed"
    (result,) = failed["sets"][0]["members"][0]["expectations"]
    assert result["words"] == "P7 must be selected"
    (decision,) = result["decisions"]
    assert decision["item"] == "P7" and decision["recorded"].startswith("selected")
    assert decision["checked"].startswith("not_requested")
    looks = AccessLogEntry.objects.filter(action="regression_set.check")
    assert looks.count() == 2


@pytest.mark.parametrize(
    ("body", "path", "code"),
    [
        ({"expectations": []}, "expectations", "required"),
        (
            {"expectations": [{"kind": "item_selected", "item": "P9"}]},
            "expectations[0].item",
            "unknown_item",
        ),
        (
            {"expectations": [{"kind": "source_not_excluded", "source": "memory"}]},
            "expectations[0].source",
            "unknown_source",
        ),
        ({"note": " "}, "note", "required"),
        (
            {"expectations": [{"kind": "status_in", "statuses": ["fine"]}]},
            "expectations[0].statuses[0]",
            "unknown_status",
        ),
        (
            {"expectations": [{"kind": "same_as_recorded", "version": 42}]},
            "expectations[0].version",
            "unknown_version",
        ),
    ],
)
def test_api__bad_member__error_at_the_field_nothing_saved(client, support, body, path, code):
    client.force_login(support)
    created = _new_set(client)
    payload = {"request_id": "req-92", "expectations": [POLICY_KEPT], "note": "T-1", **body}
    response = client.post(
        f"{SETS}/{created['id']}/members", payload, content_type="application/json"
    )
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert (path, code) in [(d["path"], d["code"]) for d in details], details
    assert not Member.objects.exists()


def test_api__a_set_of_another_agent__refused_at_the_field(client, demo_world, make_user):
    admin = make_user("adm", admin=None)
    client.force_login(admin)
    other = client.post(
        "/api/v1/agents/assistant_lite/regression-sets",
        {"name": "x", "strategy": STRATEGY, "keep_reason": "r"},
        content_type="application/json",
    )
    # assistant_lite has no such strategy: the field says so, nothing saved
    assert other.status_code == 400
    assert other.json()["error"]["details"][0]["path"] == "strategy"
    # A set of assistant_professional cannot keep a request of another agent (and a set name,
    # retention and reason are judged at their fields)
    bad = client.post(
        SETS,
        {"name": "", "strategy": STRATEGY, "keep_reason": "", "retention_days": 0},
        content_type="application/json",
    )
    assert bad.status_code == 400
    assert {d["path"] for d in bad.json()["error"]["details"]} == {
        "name",
        "keep_reason",
        "retention_days",
    }
    assert not RegressionSet.objects.exists()


def test_api__wrong_set_for_the_trace__refused(client, demo_world, make_user):
    admin = make_user("adm", admin=None)
    client.force_login(admin)
    created = _new_set(client)
    trace = Trace.objects.get(request_id="req-92")
    Trace.objects.filter(pk=trace.pk).update(strategy="another_strategy")
    response = _add(client, created["id"])
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["path"] == "set"
    assert not Member.objects.exists()


def test_api__viewer_may_not_keep_and_stale_edit_is_409(client, support, make_user):
    client.force_login(make_user("v", viewer=AGENT))
    assert client.get(SETS).status_code == 403
    client.force_login(support)
    created = _new_set(client)
    url = f"{SETS}/{created['id']}"
    ok = client.patch(url, {"revision": 1, "retention_days": 30}, content_type="application/json")
    assert ok.status_code == 200 and ok.json()["revision"] == 2
    stale = client.patch(url, {"revision": 1, "name": "x"}, content_type="application/json")
    assert stale.status_code == 409
    assert stale.json()["error"]["current"]["retention_days"] == 30


def test_member__outlives_its_trace_then_expires_with_the_set_retention(client, support):
    client.force_login(support)
    created = _new_set(client)
    assert _add(client, created["id"]).status_code == 201
    # When the trace is dropped by retention
    trace = Trace.objects.get(request_id="req-92")
    Trace.objects.filter(pk=trace.pk).delete()
    # Then the member is checked all the same
    assert _check(client, strategy=STRATEGY, version=1).json()["outcome"] == "failed"
    assert _check(client, strategy=STRATEGY, version=3).json()["outcome"] == "passed"
    # And past the set's retention, the daily purge drops it, audited with the reason kept
    assert services.members_purge_expired(now=timezone.now() + timedelta(days=401)) == 1
    assert not Member.objects.exists()
    expired = AuditRecord.objects.filter(action="regression_member.expire").get()
    assert expired.before["members"] == ["req-92 (sg-test)"]


def test_check__a_draft_reading_a_source_never_fetched__not_checkable_never_passed(client, support):
    client.force_login(support)
    created = _new_set(client)
    assert _add(client, created["id"]).status_code == 201
    body = copy.deepcopy(Version.objects.get(document__key=STRATEGY, number=3).body)
    body["optional"] = [*body.get("optional", []), "memory"]
    found = _check(client, strategy=STRATEGY, body=body).json()
    assert found["outcome"] == "not_checkable"
    member = found["sets"][0]["members"][0]
    assert "memory" in member["why_not_checkable"]
    bad = _check(client, strategy=STRATEGY, body={"required": 3})
    assert bad.status_code == 400


def _config_file(max_input_tokens: int | None = None) -> str:
    from strategies.catalog.models import Agent

    data = exchange_selectors.config_export(agent=Agent.objects.get(key=AGENT))
    if max_input_tokens is not None:
        for document in data["documents"]:
            if document["key"] == STRATEGY:
                newest = max(document["versions"], key=lambda v: v["number"])
                body = copy.deepcopy(newest["body"])
                body["budget"]["max_input_tokens"] = max_input_tokens
                number = newest["number"] + 1
                document["draft"] = {"number": number, "body": body, "note": "smaller budget"}
    return json.dumps(data)


def test_command__failing_file__junit_names_member_and_expectation(client, support, tmp_path):
    client.force_login(support)
    created = _new_set(client)
    assert _add(client, created["id"]).status_code == 201
    ok_file, bad_file = tmp_path / "ok.json", tmp_path / "bad.json"
    ok_file.write_text(_config_file())
    bad_file.write_text(_config_file(max_input_tokens=4000))
    # The file as it is passes
    call_command("regression_check", str(ok_file), "--junit", str(tmp_path / "ok.xml"))
    ok = ET.parse(tmp_path / "ok.xml").getroot()
    assert (ok.get("tests"), ok.get("failures")) == ("1", "0")
    # A draft with a 4000-token budget fails: exit 1, the JUnit case names req-92 and
    # "P7 must be selected", the failure says what was decided
    with pytest.raises(SystemExit) as exited:
        call_command("regression_check", str(bad_file), "--junit", str(tmp_path / "bad.xml"))
    assert exited.value.code == 1
    root = ET.parse(tmp_path / "bad.xml").getroot()
    assert root.get("failures") == "1"
    (case,) = root.iter("testcase")
    assert case.get("name") == "req-92 (sg-test): P7 must be selected"
    failure = case.find("failure")
    assert "P7 is not selected" in failure.get("message")
    assert "recorded selected" in failure.text and "over_budget" in failure.text
    # The API answers the same file the same way
    api = _check(client, file=bad_file.read_text()).json()
    assert api["outcome"] == "failed"
    assert api["sets"][0]["checked"] == f"{STRATEGY} draft (file)"
    # and, for a CI job that has only the API, as the same JUnit XML
    xml = _check(client, file=bad_file.read_text(), output="junit")
    assert xml.status_code == 200 and xml["Content-Type"].startswith("application/xml")
    assert xml.content.decode() == (tmp_path / "bad.xml").read_text()
    wrong = _check(client, file=bad_file.read_text(), output="yaml")
    assert wrong.status_code == 400
    assert wrong.json()["error"]["details"][0]["path"] == "output"


def test_check__file_of_another_agent_or_malformed__400_at_the_field(client, support):
    client.force_login(support)
    data = json.loads(_config_file())
    data["agent"]["key"] = "assistant_lite"
    other = _check(client, file=json.dumps(data))
    assert other.status_code == 400
    assert other.json()["error"]["details"][0]["path"] == "file.agent.key"
    assert _check(client, file="{nope").status_code == 400

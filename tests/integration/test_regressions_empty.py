"""Regression sets, the gaps of issue 35 items 1–3: a required set that loses all its members
(removed, or expired by the set's retention) refuses go-live naming it — never lets anything
through — and shows as "empty" (not "passed") on the release pages, in the check API and in
JUnit; removing the last member of a required set is refused at `member` with nothing removed;
and the rollout page shows the sets' results for the version it rolls out."""

from __future__ import annotations

import json
from datetime import timedelta
from xml.etree import ElementTree as ET

import pytest
from django.core.management import call_command
from django.utils import timezone

from console.kernel.models import AccessLogEntry, AuditRecord
from strategies.catalog.models import Environment
from strategies.catalog.selectors import manifest_latest
from strategies.catalog.services import manifest_record
from strategies.documents import services as documents
from strategies.documents.models import Version
from strategies.exchange import selectors as exchange_selectors
from strategies.releases.selectors.golive import Candidate, Path, go_live_refusals
from strategies.releases.selectors.refusals import REGRESSION_SET_FAILED
from strategies.releases.services import rollout_start
from tests.integration import test_regressions_required as required
from traces.regressions import services
from traces.regressions.models import Member, RegressionSet

pytestmark = pytest.mark.django_db

AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
MEMBERS = f"/api/v1/agents/{AGENT}/regression-members"
SET = "policy bundle"


people = required.people  # support, ops and admin of the agent, in the demo world
_with_budget = required._with_budget


def _frozen(tokens: int, ops) -> Version:
    draft = required._draft(_with_budget(tokens), ops)
    return documents.version_freeze(draft=draft, revision=None, note="budget", actor=ops)


def _rolled_out(version: Version, ops):
    """A staged rollout of `version` in sg-test, whose runtime declares split rollouts."""
    sg_test = Environment.objects.get(key="sg-test")
    manifest = dict(manifest_latest(environment=sg_test).body)
    manifest["features"] = sorted({*manifest.get("features", []), "split"})
    manifest_record(environment=sg_test, body=manifest)
    return rollout_start(version=version, environment=sg_test, actor=ops, plan="staged")


def _kept_req94(client, people, *, required_in=()) -> RegressionSet:
    """Support keeps req-94 (its policy bundle cut over the budget); admin requires the set."""
    regression_set = required._set_keeping_req94(client, people["support"])
    if required_in:
        services.regression_set_require(
            actor=people["admin"], regression_set=regression_set, environments=list(required_in)
        )
    return regression_set


def _expire_all(regression_set: RegressionSet) -> None:
    """The daily purge, a day past the set's retention: it cannot be refused."""
    later = timezone.now() + timedelta(days=regression_set.retention_days + 1)
    assert services.members_purge_expired(now=later) == 1
    assert not regression_set.members.exists()


def test_golive__a_required_set_emptied_by_retention__refuses_naming_it(client, people):
    regression_set = _kept_req94(client, people, required_in=["prod"])
    fits = Candidate.of(_frozen(16000, people["ops"]))
    prod = Environment.objects.get(key="prod")

    def refusals(path):
        found = go_live_refusals(path, fits, environment=prod, actor=people["admin"], live=None)
        return [f for f in found if f.code == REGRESSION_SET_FAILED]

    # With its member, a version that fits the bundle passes the set
    assert refusals(Path.PUBLISH) == []
    # When retention drops its only member, the set checks nothing: go-live is refused there
    _expire_all(regression_set)
    for path in (Path.PUBLISH, Path.APPROVAL, Path.ROLLOUT_START):
        (refusal,) = refusals(path)
        assert f"“{SET}”" in refusal.message
        assert "no members left" in refusal.message
        assert "not required in prod" in refusal.message  # what to do
    # A rollback is not judged by the sets; another environment does not require it
    assert refusals(Path.ROLLBACK) == []
    sg_test = Environment.objects.get(key="sg-test")
    elsewhere = go_live_refusals(
        Path.PUBLISH, fits, environment=sg_test, actor=people["admin"], live=None
    )
    assert REGRESSION_SET_FAILED not in {f.code for f in elsewhere}
    # Not required any more: nothing to refuse
    services.regression_set_require(
        actor=people["admin"], regression_set=regression_set, environments=[]
    )
    assert refusals(Path.PUBLISH) == []


def test_publish_api__a_required_empty_set__400_naming_it(client, people):
    regression_set = _kept_req94(client, people, required_in=["sg-test"])
    fits = _frozen(16000, people["ops"])
    _expire_all(regression_set)
    client.force_login(people["ops"])
    response = client.post(
        f"/api/v1/agents/{AGENT}/documents/{STRATEGY}/releases/sg-test/",
        {"version": fits.number, "reason": "bigger budget"},
        content_type="application/json",
    )
    assert response.status_code == 400, response.json()
    details = {d["code"]: d["message"] for d in response.json()["error"]["details"]}
    assert SET in details[REGRESSION_SET_FAILED]
    assert "no members left" in details[REGRESSION_SET_FAILED]


def test_pages_and_api__an_empty_set_shows_empty_not_passed(client, people):
    regression_set = _kept_req94(client, people, required_in=["prod"])
    fits = _frozen(16000, people["ops"])
    _expire_all(regression_set)
    client.force_login(people["ops"])
    # The publish page (the same component as the editor, approval and rollout pages)
    page = client.get(f"/releases/{AGENT}/{STRATEGY}/prod/publish/?version={fits.number}")
    html = page.content.decode()
    assert f'data-set="{SET}" data-outcome="empty"' in html
    assert "no members left" in html
    assert 'data-outcome="passed"' not in html
    # The editor, as typed
    document = fits.document
    documents.draft_create(document=document, body=_with_budget(16000), actor=people["ops"])
    validate = client.post(
        f"/agents/{AGENT}/documents/{STRATEGY}/draft/validate/",
        {"json": json.dumps(_with_budget(16000)), "edited": "json"},
    )
    assert f'data-set="{SET}" data-outcome="empty"' in validate.content.decode()
    # The check API
    checked = client.post(
        f"/api/v1/agents/{AGENT}/regression-check",
        {"strategy": STRATEGY, "version": fits.number},
        content_type="application/json",
    ).json()
    assert checked["outcome"] == "empty"
    assert checked["sets"][0]["outcome"] == "empty" and checked["sets"][0]["members"] == []
    # The set's own page says so, and what it means for prod
    client.force_login(people["support"])
    own = client.get(f"/agents/{AGENT}/regression-sets/{regression_set.pk}/").content.decode()
    assert 'id="set-empty" data-outcome="empty"' in own
    assert "prod requires it no version goes live there" in own
    # The agent's list of sets: empty, and where it is required, at a glance
    listed = client.get(f"/agents/{AGENT}/regression-sets/").content.decode()
    assert 'data-outcome="empty"' in listed
    assert 'data-required-in="prod"' in listed


def test_junit__an_empty_set_is_a_skipped_case_saying_empty__strict_fails(client, people, tmp_path):
    regression_set = _kept_req94(client, people)
    _expire_all(regression_set)
    data = exchange_selectors.config_export(agent=regression_set.agent)
    config = tmp_path / "agent.json"
    config.write_text(json.dumps(data))
    call_command("regression_check", str(config), "--junit", str(tmp_path / "out.xml"))
    root = ET.parse(tmp_path / "out.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("1", "0", "1")
    (case,) = root.iter("testcase")
    assert case.get("name") == "(no members left)"
    assert case.find("skipped").get("message").startswith("empty:")
    # --strict: a set that checks nothing fails the CI job
    with pytest.raises(SystemExit) as exited:
        call_command(
            "regression_check", str(config), "--strict", "--junit", str(tmp_path / "s.xml")
        )
    assert exited.value.code == 1


def test_remove__the_last_member_of_a_required_set__409_at_member_nothing_removed(client, people):
    regression_set = _kept_req94(client, people, required_in=["prod"])
    member = regression_set.members.get()
    url = f"{MEMBERS}/{member.pk}"
    before = AuditRecord.objects.count()
    client.force_login(people["support"])
    refused = client.delete(url)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "last_member_of_required_set"
    assert SET in error["message"] and "prod" in error["message"]
    assert error["details"][0]["path"] == "member"
    assert "not required in prod first" in error["details"][0]["message"]
    assert error["current"]["required_in"] == ["prod"]
    # The page: the set's page again, the refusal at the member's row
    page = client.post(f"/agents/{AGENT}/regression-members/{member.pk}/remove")
    assert page.status_code == 409
    html = page.content.decode()
    assert 'id="remove-errors"' in html and 'data-path="member"' in html
    assert Member.objects.filter(pk=member.pk).exists()
    assert AuditRecord.objects.count() == before
    # Made not required first, it can go
    services.regression_set_require(
        actor=people["admin"], regression_set=regression_set, environments=[]
    )
    assert client.delete(url).status_code == 204
    assert AuditRecord.objects.filter(action="regression_member.remove").count() == 1


def test_remove__a_member_not_the_last__is_removed_though_the_set_is_required(client, people):
    regression_set = _kept_req94(client, people, required_in=["prod"])
    second = required.keep(client, regression_set, "req-92", "P7", note="INC-4711")
    assert client.delete(f"{MEMBERS}/{second['id']}").status_code == 204
    assert list(regression_set.members.values_list("request_id", flat=True)) == ["req-94"]


def test_rollout_page__shows_the_sets_results_for_the_version_rolled_out(client, people):
    _kept_req94(client, people)
    small = _frozen(4000, people["ops"])
    rollout = _rolled_out(small, people["ops"])
    client.force_login(people["ops"])
    url = f"/releases/{AGENT}/rollouts/{rollout.key}/"
    looks = AccessLogEntry.objects.filter(action="regression_set.check").count()
    html = client.get(url).content.decode()
    assert 'id="rollout-regressions"' in html
    assert f'data-set="{SET}" data-outcome="failed"' in html
    assert 'data-request-id="req-94"' in html and "policy-P7 must be selected" in html
    assert f"with v{small.number}" in html
    assert AccessLogEntry.objects.filter(action="regression_set.check").count() == looks + 1
    # The status part polled every few seconds does not check the sets again
    client.get(url, headers={"HX-Request": "true"})
    assert AccessLogEntry.objects.filter(action="regression_set.check").count() == looks + 1


def test_rollout_page__a_strategy_without_sets__at_most_3_queries_no_section(
    client, people, django_assert_max_num_queries
):
    from django.test import RequestFactory

    from strategies.releases.views.lookups import version_regressions

    rollout = _rolled_out(_frozen(4000, people["ops"]), people["ops"])
    request = RequestFactory().get("/")
    request.user = people["ops"]
    # the right to see kept requests (the grants, read once) and the strategy's sets: none
    with django_assert_max_num_queries(3):
        assert version_regressions(request, rollout.version) == []
    client.force_login(people["ops"])
    html = client.get(f"/releases/{AGENT}/rollouts/{rollout.key}/").content.decode()
    assert 'id="rollout-status"' in html and 'id="rollout-regressions"' not in html

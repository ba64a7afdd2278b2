"""Regression sets checked everywhere a strategy changes (issue 35, item 2): the editor shows
each set's result for what is typed, an environment can require sets (an empty set cannot be
required: a field error), and the one go-live judgement refuses a publish, an approval and a
rollout's start that fail a required set, naming the set and the failing member — not a
rollback."""

from __future__ import annotations

import copy
import json

import pytest

from console.kernel.models import AuditRecord
from strategies.catalog.models import Agent, Environment
from strategies.documents import services as documents
from strategies.documents.models import Document, Version
from strategies.releases.selectors.golive import Candidate, Path, go_live_refusals
from strategies.releases.selectors.refusals import REGRESSION_SET_FAILED
from tests.factories.traces import candidates_of
from traces import stored
from traces.models import Trace
from traces.regressions import selectors as regression_selectors
from traces.regressions import services
from traces.regressions.models import RegressionSet
from traces.regressions.selectors import MAX_GROW, grow_search

pytestmark = pytest.mark.django_db

AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
BUNDLE_KEPT = {"kind": "item_selected", "item": "policy-P7"}


@pytest.fixture
def people(demo_world, make_user):
    return {
        "support": make_user("sup", support=AGENT),
        "ops": make_user("op", operator=AGENT),
        "admin": make_user("adm", admin=AGENT),
    }


def _v3() -> Version:
    return Version.objects.get(document__agent__key=AGENT, document__key=STRATEGY, number=3)


def _with_budget(tokens: int) -> dict:
    body = copy.deepcopy(_v3().body)
    body["budget"]["max_input_tokens"] = tokens
    return body


SETS = f"/api/v1/agents/{AGENT}/regression-sets"


def keep(client, regression_set, request_id: str, item: str, *, note: str) -> dict:
    """Keep `request_id` in the set (through the API, as the signed-in person): `item` must
    be selected."""
    kept = client.post(
        f"{SETS}/{regression_set.pk}/members",
        {
            "request_id": request_id,
            "expectations": [{"kind": "item_selected", "item": item}],
            "note": note,
        },
        content_type="application/json",
    )
    assert kept.status_code == 201, kept.json()
    return kept.json()


def _set_keeping_req94(client, support) -> RegressionSet:
    """Support keeps req-94 (its policy bundle cut over the budget): the bundle must be selected."""
    client.force_login(support)
    created = client.post(
        SETS,
        {"name": "policy bundle", "strategy": STRATEGY, "keep_reason": "INC reviews"},
        content_type="application/json",
    ).json()
    regression_set = RegressionSet.objects.get(pk=created["id"])
    keep(client, regression_set, "req-94", BUNDLE_KEPT["item"], note="INC-2231")
    return regression_set


def _draft(body: dict, ops) -> Version:
    document = Document.objects.get(agent__key=AGENT, key=STRATEGY)
    Version.objects.filter(document=document, state=Version.State.DRAFT).delete()
    return documents.draft_create(document=document, body=body, actor=ops, note="budget")


def test_editor__shows_each_set_failing_as_typed_with_the_decisions_side_by_side(client, people):
    regression_set = _set_keeping_req94(client, people["support"])
    _draft(_with_budget(4000), people["ops"])
    client.force_login(people["ops"])
    url = f"/agents/{AGENT}/documents/{STRATEGY}/draft/validate/"

    failing = client.post(url, {"json": json.dumps(_with_budget(4000)), "edited": "json"})
    html = failing.content.decode()
    assert f'data-set="{regression_set.name}" data-outcome="failed"' in html
    assert 'data-request-id="req-94"' in html
    assert "policy-P7 must be selected" in html and "over_budget" in html
    passing = client.post(url, {"json": json.dumps(_with_budget(16000)), "edited": "json"})
    assert 'data-outcome="passed"' in passing.content.decode()


def test_require__an_empty_set_is_refused_at_the_field_nothing_saved(client, people):
    client.force_login(people["support"])
    empty = client.post(
        f"/api/v1/agents/{AGENT}/regression-sets",
        {"name": "empty", "strategy": STRATEGY, "keep_reason": "INC reviews"},
        content_type="application/json",
    ).json()
    client.force_login(people["admin"])
    url = f"/agents/{AGENT}/regression-sets/{empty['id']}/required"
    before = AuditRecord.objects.count()
    response = client.post(url, {"required_in": ["prod"]})
    assert response.status_code == 400
    assert 'data-path="required_in"' in response.content.decode()
    assert not RegressionSet.objects.get(pk=empty["id"]).required_in.exists()
    assert AuditRecord.objects.count() == before


def test_require__support_may_not_make_a_set_required(client, people):
    regression_set = _set_keeping_req94(client, people["support"])
    url = f"/agents/{AGENT}/regression-sets/{regression_set.pk}/required"
    response = client.post(url, {"required_in": ["prod"]})
    assert response.status_code == 403
    assert not regression_set.required_in.exists()


def test_golive__a_required_set_refuses_publish_approval_and_rollout_start_not_rollback(
    client, people
):
    regression_set = _set_keeping_req94(client, people["support"])
    client.force_login(people["admin"])
    response = client.post(
        f"/agents/{AGENT}/regression-sets/{regression_set.pk}/required", {"required_in": ["prod"]}
    )
    assert response.status_code == 302
    assert AuditRecord.objects.filter(action="regression_set.update").exists()
    prod = Environment.objects.get(key="prod")
    small = _draft(_with_budget(4000), people["ops"])
    candidate = Candidate.of(small)
    for path in (Path.PUBLISH, Path.APPROVAL, Path.ROLLOUT_START):
        findings = go_live_refusals(
            path, candidate, environment=prod, actor=people["admin"], live=None
        )
        (refusal,) = [f for f in findings if f.code == REGRESSION_SET_FAILED]
        assert "policy bundle" in refusal.message and "req-94" in refusal.message
        assert "policy-P7 must be selected" in refusal.message
    rollback = go_live_refusals(
        Path.ROLLBACK, candidate, environment=prod, actor=people["admin"], live=None
    )
    assert REGRESSION_SET_FAILED not in {f.code for f in rollback}
    # Another environment does not require it
    sg_test = Environment.objects.get(key="sg-test")
    elsewhere = go_live_refusals(
        Path.PUBLISH, candidate, environment=sg_test, actor=people["admin"], live=None
    )
    assert REGRESSION_SET_FAILED not in {f.code for f in elsewhere}
    # A draft that fits the bundle passes
    fixed = Candidate.of(_draft(_with_budget(16000), people["ops"]))
    passed = go_live_refusals(
        Path.PUBLISH, fixed, environment=prod, actor=people["admin"], live=None
    )
    assert REGRESSION_SET_FAILED not in {f.code for f in passed}


def test_publish_api__refused_naming_the_set_and_member(client, people):
    regression_set = _set_keeping_req94(client, people["support"])
    services.regression_set_require(
        actor=people["admin"], regression_set=regression_set, environments=["sg-test"]
    )
    ops = people["ops"]
    small = documents.version_freeze(
        draft=_draft(_with_budget(4000), ops), revision=None, note="x", actor=ops
    )
    client.force_login(ops)
    response = client.post(
        f"/api/v1/agents/{AGENT}/documents/{STRATEGY}/releases/sg-test/",
        {"version": small.number, "reason": "smaller budget"},
        content_type="application/json",
    )
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert "policy bundle" in error["message"]
    details = {d["code"]: d["message"] for d in error["details"]}
    assert "policy bundle" in details[REGRESSION_SET_FAILED]
    assert "req-94" in details[REGRESSION_SET_FAILED]


def test_release_pages__publish_and_approval_show_the_sets_results(client, people):
    regression_set = _set_keeping_req94(client, people["support"])
    ops = people["ops"]
    small = documents.version_freeze(
        draft=_draft(_with_budget(4000), ops), revision=None, note="x", actor=ops
    )
    client.force_login(ops)
    page = client.get(f"/releases/{AGENT}/{STRATEGY}/sg-test/publish/?version={small.number}")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-set="{regression_set.name}" data-outcome="failed"' in html
    assert 'data-request-id="req-94"' in html


def test_grow__a_saved_search_adds_its_requests_and_lists_those_it_cannot(client, people):
    regression_set = _set_keeping_req94(client, people["support"])
    search = f"?environment=sg-test&strategy={STRATEGY}&status=budget_exceeded"
    url = f"/agents/{AGENT}/regression-sets/grow" + search
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="grow-form"' in html and "req-94" in html
    response = client.post(
        url,
        {
            "set": regression_set.pk,
            "want_item": "1",
            "item": "policy-P7",
            "note": "INC-2231 (all of them)",
        },
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="grow-done"' in html
    # req-94 was kept already: listed, not added twice
    assert 'data-request-id="req-94"' in html
    assert regression_set.members.filter(request_id="req-94").count() == 1
    assert regression_set.members.count() > 1
    assert AuditRecord.objects.filter(action="regression_member.add").count() == (
        regression_set.members.count()
    )


def test_grow__no_note_or_no_set__field_error_nothing_saved(client, people):
    regression_set = _set_keeping_req94(client, people["support"])
    url = f"/agents/{AGENT}/regression-sets/grow?environment=sg-test&strategy={STRATEGY}"
    response = client.post(url, {"set": regression_set.pk, "want_item": "1", "item": "P7"})
    assert response.status_code == 400
    assert 'data-path="note"' in response.content.decode()
    response = client.post(url, {"set": "999999", "want_item": "1", "item": "P7", "note": "x"})
    assert response.status_code == 400
    assert 'data-path="set"' in response.content.decode()
    assert regression_set.members.count() == 1


def test_pattern_card__offers_adding_its_requests_to_a_set(client, people):
    client.force_login(people["support"])
    page = client.get("/traces/req-94/", {"environment": "sg-test"})
    html = page.content.decode()
    assert 'id="trace-patterns"' in html
    assert "Add these requests to a set" in html
    link = html.split('data-grow="applicable_policy" href="')[1].split('"')[0].replace("&amp;", "&")
    grow = client.get(link)
    assert grow.status_code == 200
    assert "req-94" in grow.content.decode()


def test_required_in_api__admin_sets_it__empty_set_and_unknown_environment_400(client, people):
    regression_set = _set_keeping_req94(client, people["support"])
    url = f"/api/v1/agents/{AGENT}/regression-sets/{regression_set.pk}/required-in"
    # support may read it, not change it
    assert client.get(url).json() == {"set": regression_set.pk, "required_in": []}
    refused = client.put(url, {"environments": ["prod"]}, content_type="application/json")
    assert refused.status_code == 403
    client.force_login(people["admin"])
    unknown = client.put(url, {"environments": ["moon"]}, content_type="application/json")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["details"][0]["path"] == "required_in[0]"
    done = client.put(url, {"environments": ["prod"]}, content_type="application/json")
    assert done.status_code == 200 and done.json()["required_in"] == ["prod"]
    regression_set.members.all().delete()
    empty = client.put(url, {"environments": ["prod", "sg-test"]}, content_type="application/json")
    assert empty.status_code == 400
    assert empty.json()["error"]["details"][0]["code"] == "empty_set"
    assert sorted(regression_set.required_in.values_list("key", flat=True)) == ["prod"]


def _grow_brute_force(query: dict) -> list[str]:
    """The request ids a grow search should find, newest first, read off every trace's stored
    candidates: one with the reason code (of the filter's source), and one matching the
    candidate filter when there is one."""

    def has(trace, **wanted):
        wanted = {name: value for name, value in wanted.items() if value}
        return any(all(getattr(c, n) == v for n, v in wanted.items()) for c in candidates_of(trace))

    source, decision = query.get("source", ""), query.get("decision", "")
    traces = Trace.objects.filter(
        agent__key=AGENT, environment__key=query["environment"], strategy=STRATEGY
    ).order_by("-occurred_at", "-id")
    if source or decision:  # the trace list's candidate filter
        filtered = [t for t in traces if has(t, decision=decision, source=source)]
    else:
        filtered = list(traces)
    return [
        t.request_id for t in filtered if has(t, reason_code=query["reason_code"], source=source)
    ]


@pytest.mark.parametrize(
    "query",
    [
        {"reason_code": "provider_not_fetched"},
        {"reason_code": "provider_not_fetched", "source": "order_delivery"},
        # a kind of exclusion (the `kinds` array) and a reason code
        {
            "reason_code": "provider_not_fetched",
            "source": "order_delivery",
            "decision": "not_fetched",
        },
        # a selected candidate (read off the candidates too) and a reason code: more than
        # MAX_GROW match
        {"reason_code": "required", "source": "order_delivery", "decision": "selected"},
        # both checks on one walk: some of the dialogue selected, some below the threshold
        {"reason_code": "below_threshold", "source": "recent_dialogue", "decision": "selected"},
        {"reason_code": "over_budget_bundle"},
        # the reason code of the filter's source, not another's (every trace has a required
        # item selected; some a required policy)
        {"reason_code": "required", "source": "applicable_policy", "decision": "selected"},
        {"reason_code": "optional_fits", "source": "recent_dialogue", "decision": "selected"},
    ],
)
def test_grow_search__a_reason_code__exactly_the_traces_with_it_newest_first(
    people, query, monkeypatch
):
    query = {"environment": "sg-test", "strategy": STRATEGY, **query}
    expected = _grow_brute_force(query)
    all_traces = Trace.objects.filter(environment__key="sg-test", strategy=STRATEGY).count()
    assert 0 < len(expected) < all_traces  # the search tells traces apart

    monkeypatch.setattr(stored, "WALK_CHUNK", 7)  # several chunks
    grow = grow_search(user=people["support"], agent=Agent.objects.get(key=AGENT), query=query)
    assert [t.request_id for t in grow.traces] == expected[:MAX_GROW]
    assert grow.more == (len(expected) > MAX_GROW)

    monkeypatch.setattr(regression_selectors, "MAX_GROW", 2)
    few = grow_search(user=people["support"], agent=Agent.objects.get(key=AGENT), query=query)
    assert [t.request_id for t in few.traces] == expected[:2]
    assert few.more == (len(expected) > 2)

"""The trace page's reads written out in SQL (issue 36: the whole view at 10M): each gives
what the ORM query it replaced gave — the outcomes of a request with their kinds, the keep
card's sets with their counts and whether they keep the request, the strategy's versions
marked live in the trace's environment, and what each document has live there."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from strategies.catalog.models import Environment
from strategies.documents.models import Version
from strategies.releases.models import Release
from tests.factories.outcomes import outcome_kinds
from traces import replay, selectors
from traces.models import Trace
from traces.outcomes.models import Outcome, OutcomeKind
from traces.outcomes.selectors import _rows, outcomes_for_requests
from traces.regressions import selectors as regression_selectors

pytestmark = pytest.mark.django_db

AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
SETS = f"/api/v1/agents/{AGENT}/regression-sets"


@pytest.fixture
def trace(demo_world) -> Trace:
    return Trace.objects.select_related("agent", "environment").get(request_id="req-92")


def _kinds(environment) -> dict[str, OutcomeKind]:
    """The demo's declared kinds there, else the standard ones declared."""
    declared = {kind.key: kind for kind in OutcomeKind.objects.filter(environment=environment)}
    return declared or outcome_kinds(environment)


def test_outcomes__of_the_request_in_its_environment__as_the_orm_reads_them(trace):
    kinds = _kinds(trace.environment)
    other_environment = Environment.objects.exclude(pk=trace.environment_id).first()
    other_kinds = _kinds(other_environment)
    request_id = "req-outcomes-read"  # none in the demo yet
    now = timezone.now()
    for kind, value in (("rating", 2), ("escalated", True), ("resolution", "refund")):
        Outcome.objects.create(
            environment=trace.environment,
            agent=trace.agent,
            request_id=request_id,
            kind=kinds[kind],
            value=value,
            occurred_at=now - timedelta(minutes=5),
            reported_by="token:runtime",
        )
    # The same request id in another environment, and another request here: not this one's.
    Outcome.objects.create(
        environment=other_environment,
        agent=trace.agent,
        request_id=request_id,
        kind=other_kinds["escalated"],
        value=False,
        occurred_at=now,
    )
    Outcome.objects.create(
        environment=trace.environment,
        agent=trace.agent,
        request_id="req-other",
        kind=kinds["escalated"],
        value=False,
        occurred_at=now,
    )

    found = outcomes_for_requests(environment_id=trace.environment_id, request_ids=[request_id])

    rows = found[request_id]
    assert list(found) == [request_id]
    assert [(row.kind, row.value) for row in rows] == [
        ("escalated", True),
        ("rating", 2),
        ("resolution", "refund"),
    ]
    assert rows == _rows(
        Outcome.objects.filter(environment=trace.environment, request_id=request_id)
    )
    escalated = rows[0]
    assert escalated.bad is True and escalated.rate_name == "escalation rate"
    assert escalated.environment == trace.environment.key and escalated.agent == AGENT


def test_outcomes__none_reported__empty(trace):
    assert outcomes_for_requests(environment_id=trace.environment_id, request_ids=["nope"]) == {}


def _new_set(client, name: str, strategy: str = STRATEGY) -> int:
    response = client.post(
        SETS,
        {"name": name, "strategy": strategy, "keep_reason": "INC reviews", "retention_days": 400},
        content_type="application/json",
    )
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def _keep(client, set_id: int, request_id: str, environment: str) -> None:
    response = client.post(
        f"{SETS}/{set_id}/members",
        {
            "request_id": request_id,
            "environment": environment,
            "expectations": [{"kind": "item_selected", "item": "P7"}],
            "note": "TICKET-1",
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.json()


def test_keep_card__sets_newest_first_counted_and_marked_when_they_keep_it(
    client, trace, make_user
):
    user = make_user("sup", support=AGENT)
    client.force_login(user)
    older = _new_set(client, "older cuts")
    keeping = _new_set(client, "policy cuts")
    _keep(client, keeping, trace.request_id, trace.environment.key)
    other_request = (
        Trace.objects.filter(agent=trace.agent, environment=trace.environment, strategy=STRATEGY)
        .exclude(pk=trace.pk)
        .first()
    )
    _keep(client, older, other_request.request_id, trace.environment.key)
    _keep(client, keeping, other_request.request_id, trace.environment.key)

    card = regression_selectors.keep_card(user=user, trace=trace)

    assert [(s.name, s.member_count, s.keeps) for s in card.sets] == [
        ("policy cuts", 2, True),
        ("older cuts", 1, False),
    ]
    assert [s.pk for s in card.kept_in] == [keeping]


def test_replay_choices__newest_first__live_only_where_released_in_the_trace_environment(trace):
    versions = Version.objects.filter(
        document__agent=trace.agent, document__key=STRATEGY, document__kind="strategy"
    )
    live_here = set(
        Release.objects.filter(
            document__agent=trace.agent, document__key=STRATEGY, environment=trace.environment
        ).values_list("version__number", flat=True)
    )

    choices = replay.replay_choices(trace)

    assert [c.number for c in choices] == sorted(versions.values_list("number", flat=True))[::-1]
    assert {c.number for c in choices if c.live} == live_here
    assert {c.number: c.state for c in choices} == dict(versions.values_list("number", "state"))
    assert [c.number for c in choices if c.recorded] == [trace.strategy_version]


def test_versions_used__live_number_of_each_document_in_the_trace_environment(trace):
    live = dict(
        Release.objects.filter(
            document__agent=trace.agent, environment=trace.environment
        ).values_list("document__key", "version__number")
    )

    used = selectors.versions_used(trace)

    assert {v.document for v in used} == set(trace.documents)
    assert {v.document: v.live_number for v in used} == {
        document: live.get(document) for document in trace.documents
    }
    assert live, "the demo has something live in the trace's environment"


def _values(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


def test_trace_lookup__the_trace_its_agent_and_environment__as_the_orm_builds_them(
    trace, make_user
):
    """Every column of the three rows, through its field's converters (JSON as JSON, times
    aware), and the instances are stored rows (saving one updates it)."""
    Environment.objects.filter(pk=trace.environment_id).update(break_glass_relaxed={"freeze": True})
    user = make_user("sup", support=AGENT)

    (found,) = selectors.trace_matches(user=user, request_id=trace.request_id)

    expected = Trace.objects.select_related("agent", "environment").get(pk=trace.pk)
    assert _values(found) == _values(expected)
    assert _values(found.agent) == _values(expected.agent)
    assert _values(found.environment) == _values(expected.environment)
    assert found.environment.break_glass_relaxed == {"freeze": True}
    assert isinstance(found.documents, dict) and found.documents == trace.documents
    assert found._state.adding is False and found.agent_id == found.agent.pk


def test_trace_lookup__out_of_scope_or_other_environment__nothing(trace, make_user):
    outsider = make_user("other", support="assistant_lite")
    assert selectors.trace_matches(user=outsider, request_id=trace.request_id) == []
    insider = make_user("sup", support=AGENT)
    other = Environment.objects.exclude(pk=trace.environment_id).first()
    assert (
        selectors.trace_matches(user=insider, request_id=trace.request_id, environment=other.key)
        == []
    )
    (found,) = selectors.trace_matches(
        user=insider, request_id=trace.request_id, environment=trace.environment.key
    )
    assert found.pk == trace.pk


def test_grant_rows__direct_group_and_every_agent_grants__as_the_orm_reads_them(
    demo_world, make_user
):
    """Read first on every signed-in page (console.kernel.policy): the user's own grants and
    their groups', with each role's capabilities and the agent's key (none: every agent)."""
    from django.contrib.auth.models import Group

    from console.kernel.models import Grant, Role
    from strategies.catalog.models import Agent

    user = make_user("mixed", support=AGENT)
    team = Group.objects.create(name="ops-team")
    user.groups.add(team)
    Grant.objects.create(group=team, role=Role.objects.get(name="operator"), agent=None)
    Grant.objects.create(
        group=team,
        role=Role.objects.get(name="viewer"),
        agent=Agent.objects.get(key="assistant_lite"),
    )
    other = make_user("other", support="assistant_lite")

    rows = Grant.objects.rows_of(user)

    expected = Grant.objects.of(user).values_list(
        "agent_id", "role__capabilities", "role__name", "agent__key"
    )
    assert sorted(rows, key=str) == sorted(expected, key=str)
    assert {(name, key) for _, _, name, key in rows} == {
        ("support", AGENT),
        ("operator", None),
        ("viewer", "assistant_lite"),
    }
    assert Grant.objects.rows_of(other) == [
        (
            Agent.objects.get(key="assistant_lite").pk,
            list(Role.objects.get(name="support").capabilities),
            "support",
            "assistant_lite",
        )
    ]

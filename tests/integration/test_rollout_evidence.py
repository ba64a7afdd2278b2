"""Rollout evidence at ingest (traces.rollouts): a batch of a staged rollout's traces fills
the rollout counters exactly — per arm, paired kinds from each trace's shadow, the sources
neither version had, the first request ids — in the ingest's transaction; traces claiming a
rollout, arm or version they do not have are stored and counted as faults, never as
evidence; outcomes reported later count on the arm; the trace page shows the rollout."""

from __future__ import annotations

from datetime import timedelta

import pytest
from context_runtime import wire
from django.db import connection
from django.utils import timezone

from strategies.releases.models import Rollout
from tests.factories import (
    ReleaseFactory,
    candidate,
    post_batch,
    runtime_token,
    task_in_arm,
    trace_payload,
    world,
)
from tests.factories.documents import DocumentFactory, FrozenVersionFactory
from tests.factories.outcomes import outcome_kinds, post_outcomes
from tests.factories.traces import TraceFactory
from traces import compact, partitions
from traces.health.models import HealthCounter
from traces.models import Trace
from traces.rollouts import guards
from traces.rollouts import selectors as rollout_selectors
from traces.rollouts.models import RolloutCounter, RolloutCounterHour, RolloutSample
from traces.rollouts.selectors import step_evidence

pytestmark = pytest.mark.django_db

MINUTE = (timezone.now() - timedelta(minutes=3)).replace(second=5, microsecond=0)
STRATEGY = "after_sales_consultation"
PLAN = [{"share": 0.0, "bake_seconds": 600}, {"share": 0.1, "bake_seconds": 600}]


@pytest.fixture
def env():
    data = world()
    document = DocumentFactory(agent=data["agents"]["assistant_professional"], key=STRATEGY)
    data["strategy"] = {n: FrozenVersionFactory(document=document, number=n) for n in (3, 4)}
    sg_test = data["environments"]["sg-test"]
    ReleaseFactory(version=data["strategy"][3], environment=sg_test)
    data["rollout"] = Rollout.objects.create(
        key="ro-7",
        document=document,
        environment=sg_test,
        version=data["strategy"][4],
        control_version=data["strategy"][3],
        plan=PLAN,
        plan_hash="test",
        state=Rollout.State.RUNNING,
        step=1,
        step_started_at=MINUTE - timedelta(minutes=1),
        started_by="test",
    )
    return data


@pytest.fixture
def secret(env):
    return runtime_token(env["environments"]["sg-test"])


def at(seconds: int = 0) -> str:
    return (MINUTE + timedelta(seconds=seconds)).isoformat()


def served(request_id, arm, *, shadow=None, rollout_id="ro-7", step=1, version=None, **fields):
    """A trace of the rollout: arm new is served v4 with v3 as its shadow, arm old v3 with v4."""
    version = version or (4 if arm == "new" else 3)
    other = 3 if arm == "new" else 4
    block = {"version": other, "status": "ready", "selected": ["task_state:T9", "P7-v2"]}
    fields.setdefault("occurred_at", at())
    if arm in ("new", "old") and "task" not in fields:
        # a unit the console assigns that arm (at the plan's share; past it, any unit)
        share = PLAN[step]["share"] if step < len(PLAN) else 0.5
        fields["task"] = task_in_arm(arm, rollout_id=rollout_id, share=share)
    return trace_payload(
        request_id,
        documents={"profile": 7, STRATEGY: version},
        rollout={"id": rollout_id, "arm": arm, "step": step},
        shadow={**block, **(shadow or {})},
        **fields,
    )


def over_budget_p7():
    """live dropped the required P7-v2 (over budget); the other version selected it."""
    return [
        candidate(),
        candidate(
            "P7-v2",
            source="applicable_policy",
            decision="over_budget",
            reason_code="over_budget_required",
        ),
    ]


def order_not_fetched():
    return [
        candidate(),
        candidate("P7-v2", source="applicable_policy"),
        candidate(
            "order:A1042",
            source="order_delivery",
            decision="not_fetched",
            reason_code="provider_not_fetched",
        ),
    ]


def counter(arm: str, key: str = "ro-7", step: int = 1) -> RolloutCounter:
    return RolloutCounter.objects.get(rollout_key=key, step=step, arm=arm)


def test_ingest__a_rollout_batch__fills_the_counters_exactly(client, secret):
    batch = [
        served("n-same", "new"),
        # new worse three ways: not usable while old was, lost a required item old selected,
        # 6200 tokens against old's 5000 (> 1.2 ×)
        served(
            "n-worse",
            "new",
            status="budget_exceeded",
            candidates=over_budget_p7(),
            shadow={"used_tokens": 5000},
        ),
        served("o-same", "old"),
        # arm old: the shadow is new — it failed where old was ready, and used 8000 > 1.2 × 6200
        served("o-worse", "old", shadow={"status": "budget_exceeded", "used_tokens": 8000}),
        # a provider failing: live (old) did not fetch it, and the other version reads it too
        served(
            "o-order",
            "old",
            status="degraded",
            degradation="general_policy_only",
            candidates=order_not_fetched(),
        ),
        served("o-fallback", "old", config_fallback=True, config_resolution="stale"),
    ]
    response = post_batch(client, secret, batch).json()
    assert response["accepted"] == 6, response

    new, old = counter("new"), counter("old")
    assert (new.traces, new.usable, new.compared) == (2, 1, 2)
    assert (new.paired_status, new.paired_required_lost, new.paired_tokens) == (1, 1, 1)
    assert (old.traces, old.usable, old.compared, old.config_fallback) == (4, 4, 4, 1)
    assert (old.paired_status, old.paired_required_lost, old.paired_tokens) == (1, 0, 1)
    assert old.not_fetched == {"order_delivery": 1}
    assert old.not_fetched_both == {"order_delivery": 1}
    assert new.faults == old.faults == {}
    assert RolloutSample.objects.get(rollout_key="ro-7", step=1).request_ids == {
        "status": ["n-worse", "o-worse"],
        "required_lost": ["n-worse"],
        "tokens": ["n-worse", "o-worse"],
        "not_fetched_both:order_delivery": ["o-order"],  # the attribution's requests to open
    }
    # The same statement added them to their hour.
    hour = RolloutCounterHour.objects.get(rollout_key="ro-7", step=1, arm="old")
    assert (hour.traces, hour.paired_status, hour.not_fetched) == (4, 1, {"order_delivery": 1})
    # The rollout's shadow is the other arm, not a shadow release: no health fault for it.
    assert not any(row.faults for row in HealthCounter.objects.all())
    stored = dict(Trace.objects.values_list("request_id", "rollout_arm"))
    assert stored["n-same"] == "new" and stored["o-order"] == "old"


def test_ingest__claims_the_rollout_does_not_have__stored_and_counted_as_faults(client, secret):
    batch = [
        served("unknown", "new", rollout_id="ro-999"),
        served("wrong-version", "new", version=3),  # arm new must be served v4
        served("wrong-shadow", "old", shadow={"version": 5}),
        served("no-such-arm", "both", version=4),  # a runtime that mislabels its arms
        served("good", "new"),
    ]
    assert post_batch(client, secret, batch).json()["accepted"] == 5
    assert Trace.objects.filter(rollout_key__isnull=False).count() == 5

    assert counter("").faults == {"rollout_arm_unknown": 1}
    assert counter("").traces == 0

    assert counter("new", key="ro-999").faults == {"rollout_unknown": 1}
    assert counter("new", key="ro-999").traces == 0
    assert counter("new").faults == {"rollout_version": 1}
    assert counter("old").faults == {"rollout_shadow_version": 1}
    assert (counter("new").traces, counter("old").traces) == (1, 0)


def forged(request_id, claimed, *, step=1, **fields):
    """A trace claiming arm `claimed` for a unit the console assigns the other arm."""
    other = "old" if claimed == "new" else "new"
    share = PLAN[step]["share"] if step < len(PLAN) else 1.0
    return served(
        request_id,
        claimed,
        step=step,
        task=task_in_arm(other, rollout_id="ro-7", share=share),
        **fields,
    )


def rejected_codes(response) -> dict:
    return {r["request_id"]: [e["code"] for e in r["errors"]] for r in response["rejected"]}


def test_ingest__8_forged_new_did_worse_traces__refused_per_trace_counted_never_evidence(
    client, secret
):
    """Given a token that can write traces, when it sends 8 traces claiming arm new (the new
    version failed where the old was ready) for units the rollout serves the old version,
    then each is refused with `rollout_arm_mismatch`, none is stored, the 8 are counted as
    faults, and the step's evidence holds only the real traffic: the paired guard sees no
    regression."""
    real = [served(f"o{i}", "old") for i in range(20)] + [served("n0", "new")]
    worse = {"status": "budget_exceeded"}
    fakes = [forged(f"fake{i}", "new", **worse) for i in range(8)]
    response = post_batch(client, secret, real + fakes).json()

    assert response["accepted"] == 21
    assert rejected_codes(response) == {f"fake{i}": ["rollout_arm_mismatch"] for i in range(8)}
    message = response["rejected"][0]["errors"][0]
    assert message["path"] == "rollout.arm" and "is in arm 'old' of ro-7" in message["message"]
    assert not Trace.objects.filter(request_id__startswith="fake").exists()
    assert counter("new").faults == {"rollout_arm_mismatch": 8}
    evidence = step_evidence(rollout_key="ro-7", step=1, since=MINUTE - timedelta(minutes=1))
    assert (evidence.new.traces, evidence.paired_count("status").requests) == (1, 0)
    assert evidence.faults == {"rollout_arm_mismatch": 8}


def test_ingest__3000_forged_agreeing_traces__cannot_dilute_8_real_regressions(client, secret):
    """Given 8 real requests where the new version failed and 120 where both agreed, when a
    token adds 3,000 forged "both versions agree" traces on the new arm for units of the old
    one, then they are all refused and the paired guard still breaches on the 8."""
    worse = {"status": "budget_exceeded"}
    real = [served(f"bad{i}", "new", **worse) for i in range(8)]
    real += [served(f"ok{i}", "old") for i in range(120)]
    fakes = [forged(f"agree{i}", "new") for i in range(3000)]
    for start in range(0, len(fakes), 1000):
        response = post_batch(client, secret, fakes[start : start + 1000]).json()
        assert (response["accepted"], len(response["rejected"])) == (0, 1000)
    assert post_batch(client, secret, real).json()["accepted"] == 128

    evidence = step_evidence(rollout_key="ro-7", step=1, since=MINUTE - timedelta(minutes=1))
    assert evidence.compared == 128
    assert evidence.faults == {"rollout_arm_mismatch": 3000}
    paired = next(
        r for r in guards.evaluate(evidence, guards.GuardSettings()) if r.name == "paired"
    )
    assert paired.state == "breach", paired.message


def test_ingest__a_step_the_rollout_has_not_served__refused(client, secret, env):
    """Steps are the console's too: a step past the one the rollout is at, a step its plan
    does not have, and the watch's step of a rollout without a watch are refused; an earlier
    step it did serve (a runtime a poll behind) is evidence there."""
    response = post_batch(
        client,
        secret,
        [
            served("ahead", "new", step=2),  # ro-7 is at step 1 of 2 (its watch would be 2)
            served("no-such-step", "new", step=9),
            served("earlier", "old", step=0),  # share 0: every unit is old
        ],
    ).json()
    assert response["accepted"] == 1
    assert rejected_codes(response) == {
        "ahead": ["rollout_step_mismatch"],
        "no-such-step": ["rollout_step_mismatch"],
    }
    assert counter("old", step=0).traces == 1
    assert counter("new", step=2).faults == {"rollout_step_mismatch": 1}
    # Not yet served at all (waiting for approval): no step is.
    Rollout.objects.filter(pk=env["rollout"].pk).update(
        state=Rollout.State.AWAITING_APPROVAL, step=0, step_started_at=None
    )
    response = post_batch(client, secret, [served("waiting", "old", step=0)]).json()
    assert rejected_codes(response) == {"waiting": ["rollout_step_mismatch"]}


def test_ingest__forged_watch_traces__refused_for_units_the_watch_does_not_run(client, secret, env):
    """A completed rollout's paired watch runs the old version as shadow on `watch_share` of
    the units: a watch trace for a unit outside that share, or on arm old, is refused; one
    for a unit inside it counts on the watch's step."""
    Rollout.objects.filter(pk=env["rollout"].pk).update(
        state=Rollout.State.COMPLETED,
        ended_at=timezone.now(),
        watch_until=timezone.now() + timedelta(hours=1),
        watch_share=0.1,
    )
    watch_step = len(PLAN)
    inside = task_in_arm("watch", rollout_id="ro-7", share=0.1)
    outside = task_in_arm("old", rollout_id="ro-7", share=0.1)  # bucket ≥ 0.1: not watched
    worse = {"status": "budget_exceeded"}
    response = post_batch(
        client,
        secret,
        [
            served("watched", "new", step=watch_step, task=inside),
            *(served(f"fake{i}", "new", step=watch_step, task=outside, **worse) for i in range(8)),
            served("old-arm", "old", step=watch_step, task=inside),
        ],
    ).json()
    assert response["accepted"] == 1
    assert set(rejected_codes(response)) == {*(f"fake{i}" for i in range(8)), "old-arm"}
    assert {c for codes in rejected_codes(response).values() for c in codes} == {
        "rollout_arm_mismatch"
    }
    evidence = step_evidence(rollout_key="ro-7", step=watch_step, since=MINUTE)
    assert (evidence.new.traces, evidence.paired_count("status").requests) == (1, 0)


def test_outcomes__of_a_refused_trace__not_counted(client, secret, env):
    """An outcome for a forged request finds no trace: nothing is counted on any arm."""
    outcome_kinds(env["environments"]["sg-test"])
    post_batch(client, secret, [forged("fake", "new"), served("n1", "new")])
    post_outcomes(
        client,
        secret,
        [
            {
                "request_id": rid,
                "kind": "escalated",
                "value": True,
                "agent": "assistant_professional",
            }
            for rid in ("fake", "n1")
        ],
    )
    assert counter("new").outcomes_bad == {"escalated": 1}


def test_ingest__another_environments_rollout__a_fault_there(client, env):
    prod = runtime_token(env["environments"]["prod"])
    ReleaseFactory(version=env["strategy"][3], environment=env["environments"]["prod"])
    assert post_batch(client, prod, [served("elsewhere", "new")]).json()["accepted"] == 1
    row = RolloutCounter.objects.get(rollout_key="ro-7")
    assert (row.traces, row.faults) == (0, {"rollout_unknown": 1})
    assert row.environment_id == env["environments"]["prod"].pk


def test_ingest__sample_ids__the_first_five_per_kind_across_batches(client, secret):
    worse = {"status": "budget_exceeded"}
    post_batch(client, secret, [served(f"a{i}", "old", shadow=worse) for i in range(3)])
    post_batch(client, secret, [served(f"b{i}", "old", shadow=worse) for i in range(4)])
    assert counter("old").paired_status == 7
    sample = RolloutSample.objects.get(rollout_key="ro-7", step=1).request_ids
    assert sample == {"status": ["a0", "a1", "a2", "b0", "b1"]}


def test_step_evidence__sums_the_steps_minutes_and_the_guards_judge_it(client, secret):
    batch = [served(f"o{i}", "old") for i in range(12)] + [
        served("n1", "new", status="budget_exceeded")
    ]
    post_batch(client, secret, batch)
    later = [served("n2", "new", occurred_at=at(65))]  # the next minute
    post_batch(client, secret, later)
    evidence = step_evidence(rollout_key="ro-7", step=1, since=MINUTE - timedelta(minutes=1))
    assert evidence.share == 0.1
    assert (evidence.new.traces, evidence.old.traces, evidence.compared) == (2, 12, 14)
    assert evidence.paired_count("status").requests == 1
    assert evidence.paired_count("status").request_ids == ("n1",)
    # an earlier `since` than the step's rows changes nothing; a later one drops a minute
    assert (
        step_evidence(rollout_key="ro-7", step=1, since=MINUTE + timedelta(seconds=60)).new.traces
        == 1
    )
    results = {r.name: r.state for r in guards.evaluate(evidence, guards.GuardSettings())}
    assert results["minimum_data"] == "insufficient"
    assert results["paired"] == "ok"  # 1 request: never a breach under 5


def test_outcomes__counted_on_the_arm_of_evidence_traces_only(client, secret, env):
    outcome_kinds(env["environments"]["sg-test"])
    post_batch(client, secret, [served("n1", "new"), served("bad-claim", "new", version=3)])
    response = post_outcomes(
        client,
        secret,
        [
            {
                "request_id": "n1",
                "kind": "escalated",
                "value": True,
                "agent": "assistant_professional",
            },
            {"request_id": "n1", "kind": "rating", "value": 5, "agent": "assistant_professional"},
            {
                "request_id": "bad-claim",
                "kind": "escalated",
                "value": True,
                "agent": "assistant_professional",
            },
        ],
    )
    assert response.json()["accepted"] == 3
    row = counter("new")
    assert RolloutCounterHour.objects.get(rollout_key="ro-7", arm="new").outcomes == row.outcomes
    assert row.outcomes == {"escalated": 1, "rating": 1}
    assert row.outcomes_bad == {"escalated": 1}
    assert row.traces == 1  # outcomes add no traces


def test_trace_page__shows_the_rollout_arm_and_step(client, secret, make_user):
    # Given two requests of ro-7 (v4 over v3) at the wire's step index 1 of its 2 steps
    post_batch(client, secret, [served("n1", "new"), served("o1", "old")])
    client.force_login(make_user("sup", support="assistant_professional"))
    page = client.get("/traces/n1/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="trace-rollout"' in html and 'href="/rollouts/ro-7/"' in html
    # Then it reads as the rollout page does: the version by number, the step from 1
    assert "served <strong>the new version (v4)</strong> · step <strong>2</strong> of 2" in html
    assert "arm</span>" not in html and "step</span> <strong>1</strong>" not in html
    assert "arm new, step index 1 (the wire counts steps from 0)" in html  # one hover away
    old = client.get("/traces/o1/").content.decode()
    assert "served <strong>the current version (v3)</strong>" in old


def test_step_evidence__a_step_of_days__whole_hours_from_the_hour_table_edges_from_minutes(env):
    from django.db import connection

    from traces.health.counters import counters_write_tables
    from traces.rollouts import counters

    start = (timezone.now() - timedelta(days=2)).replace(minute=17, second=0, microsecond=0)
    rows = {}
    for i in range(0, 2 * 24 * 60, 7):  # every 7th minute of two days
        when = start + timedelta(minutes=i)
        for arm, n in (("new", 1 + i % 3), ("old", 10 + i % 5)):
            counts = counters.MINUTES.counts()
            counts.add("traces", n)
            counts.tally("not_fetched", "order_delivery", i % 2)
            rows[("ro-7", 1, when, arm, env["environments"]["sg-test"].pk)] = counts
    with connection.cursor() as cursor:
        counters_write_tables(cursor, counters.minutes_and_hours(rows))
    since = start + timedelta(minutes=25)  # mid-hour: minutes first, then whole hours
    evidence = step_evidence(rollout_key="ro-7", step=1, since=since)
    for arm in ("new", "old"):
        expected = [c for (_, _, when, a, _), c in rows.items() if a == arm and when >= since]
        assert evidence.arm(arm).traces == sum(c.scalars["traces"] for c in expected)
        assert evidence.arm(arm).not_fetched["order_delivery"] == sum(
            c.maps["not_fetched"]["order_delivery"] for c in expected
        )


def test_guards__order_provider_failing_30pct_in_both_arms__pause_naming_it_no_rollback(
    client, secret
):
    """Through ingest: 1,000 requests at share 0.1 (every tenth on new), the order provider
    not fetched on 30% of them in both arms — the same requests for both versions."""
    batch = []
    for i in range(1000):
        arm = "new" if i % 10 == 0 else "old"
        failing = (i // 10) % 10 < 3  # 30% of each arm
        fields = {"candidates": order_not_fetched()} if failing else {}
        if failing:
            fields.update(status="degraded", degradation="general_policy_only")
        batch.append(served(f"r{i}", arm, **fields))
    for start in range(0, 1000, 250):
        assert post_batch(client, secret, batch[start : start + 250]).json()["accepted"] == 250
    evidence = step_evidence(rollout_key="ro-7", step=1, since=MINUTE - timedelta(minutes=1))
    assert (evidence.new.traces, evidence.old.traces) == (100, 900)
    results = {r.name: r for r in guards.evaluate(evidence, guards.GuardSettings())}
    assert results["attribution"].state == "pause"
    assert results["attribution"].message.startswith(
        "The order_delivery provider returned nothing for both versions in 30% of requests"
    )
    failed = {f"r{i}" for i in range(1000) if (i // 10) % 10 < 3}
    named = results["attribution"].evidence["request_ids"]
    assert len(named) == 5 and set(named) <= failed
    assert {r.state for r in results.values()} <= {"ok", "pause"}
    assert results["sample_ratio"].state == "ok"


def test_purge__rollout_counters_past_30_days__deleted_with_their_samples(client, secret, settings):
    from traces.rollouts.services import rollout_counters_purge_expired
    from traces.rollouts.tasks import purge_expired

    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert purge_expired.name in scheduled  # the beat runs it
    post_batch(client, secret, [served("n1", "new", status="budget_exceeded")])
    assert RolloutSample.objects.count() == 1
    assert rollout_counters_purge_expired(now=timezone.now() + timedelta(days=29)) == 0
    deleted = rollout_counters_purge_expired(now=timezone.now() + timedelta(days=31))
    assert deleted == 2  # the minute row and its hour
    assert not RolloutCounter.objects.exists() and not RolloutCounterHour.objects.exists()
    assert not RolloutSample.objects.exists()


def _stored_before(env, request_id, at, candidates, **fields):
    """A trace stored directly (no ingest: the baseline reads traces up to 8 days old) with
    these wire candidates in its row."""
    with connection.cursor() as cursor:
        partitions.ensure_days(cursor, {at.date()})
    fields.setdefault("environment", env["environments"]["sg-test"])
    return TraceFactory(
        request_id=request_id,
        agent=env["agents"]["assistant_professional"],
        occurred_at=at,
        packed_candidates=compact.encode(candidates),
        **{"strategy": STRATEGY, **fields},
    )


def _wire(item, source, decision="selected", outcome=None):
    return wire.Candidate(
        id=item, source=source, decision=decision, required=True, reason="r", outcome=outcome
    )


def test_provider_baseline__counts_the_latest_traces_before_the_rollout_that_missed_a_source(
    env, monkeypatch
):
    """The attribution guard's baseline: of the environment's latest requests of the strategy
    before the rollout began (within 7 days, none of a rollout), those whose provider of a
    watched source did not deliver (decision or outcome not_fetched), once per request."""
    start = timezone.now() - timedelta(hours=1)
    Rollout.objects.filter(key="ro-7").update(started_at=start)
    order, policy = "order_delivery", "applicable_policy"
    minutes = [start - timedelta(minutes=n) for n in range(1, 5)]
    _stored_before(env, "b-clean", minutes[0], [_wire("T9", "task_state")])
    _stored_before(
        env,
        "b-order-outcome",
        minutes[1],
        [
            _wire("order:1", order, decision="irrelevant", outcome="not_fetched"),
            _wire("order:2", order, decision="not_fetched"),
        ],
    )
    _stored_before(env, "b-policy", minutes[2], [_wire("P7", policy, decision="not_fetched")])
    _stored_before(env, "b-order", minutes[3], [_wire("order:1", order, decision="not_fetched")])
    missed_order = [_wire("order:1", order, decision="not_fetched")]
    # Not before the rollout: after its start, of another rollout, too old, another strategy,
    # another environment.
    _stored_before(env, "x-after", start + timedelta(minutes=1), missed_order)
    _stored_before(env, "x-rollout", minutes[0], missed_order, rollout_key="ro-old")
    _stored_before(env, "x-old", start - timedelta(days=8), missed_order)
    _stored_before(env, "x-strategy", minutes[0], missed_order, strategy="other_strategy")
    _stored_before(env, "x-prod", minutes[0], missed_order, environment=env["environments"]["prod"])

    baseline = rollout_selectors.provider_baseline(rollout_key="ro-7", sources={order})
    assert (baseline.traces, dict(baseline.not_fetched)) == (4, {order: 2})
    both = rollout_selectors.provider_baseline(rollout_key="ro-7", sources={order, policy})
    assert dict(both.not_fetched) == {order: 2, policy: 1}
    # The latest requests only: of the newest three, one missed the order service.
    monkeypatch.setattr(rollout_selectors, "BASELINE_TRACES", 3)
    latest = rollout_selectors.provider_baseline(rollout_key="ro-7", sources={order})
    assert (latest.traces, dict(latest.not_fetched)) == (3, {order: 1})

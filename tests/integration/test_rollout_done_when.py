"""Issue 23's "Done when", end to end with real processes: the console (granian web server and
config stream server), a Celery worker running the beat (the guards judged on its schedule)
and the SDK in another process (tests/runtime_sim.py: `context_runtime.rollouts.serve` assigns
each request's arm and runs the other arm as shadow on the same candidates), all on this
test's PostgreSQL and Redis.

- A version equal to v3 but with `max_input_tokens` 4000, rolled out 10% → 50% → 100% (2 min
  bakes) under ≥ 5 requests/s, is rolled back by the paired guard within its first step, at
  the beat's real 30 s period; the rollout page and the audit row show the evidence, and the
  runtime serves v3 again within a second.
- An A/A rollout (v3 re-frozen as v4) over 10,000 requests: no rollback, no pause, every step
  passed, and no task ever changes arm.
- The order provider failing 30% of calls during a good rollout: no rollback, a pause
  naming `order_delivery`.
- Item 4, the paired watch: the 4000-token copy rolled out and finished is live; the runtime
  serves it to everyone and runs v3 as shadow for the sampled tasks only; the paired guard
  warns with five of those requests, and nothing is rolled back.

Measured delays are printed (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections import defaultdict

import pytest

from console.kernel.models import AuditRecord
from strategies.catalog.services import manifest_record
from strategies.releases.models import Release, Rollout
from strategies.releases.services import release_publish, rollout_finish, rollout_start
from tests.conftest import celery_worker
from tests.factories import manifest_body, runtime_token
from tests.factories.documents import frozen_version
from tests.factories.releases import rollout_setup
from tests.runtime_sim import RuntimeSim, wait_until
from traces.models import Trace

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

STRATEGY = "after_sales_consultation"
STEPS = (0.1, 0.5, 1.0)


def plan(*bakes: int) -> list[dict]:
    return [
        {"share": share, "bake_seconds": bake} for share, bake in zip(STEPS, bakes, strict=True)
    ]


@pytest.fixture
def world(transactional_db):
    """rollout_setup, with v3 live in sg-test (what the runtime serves before the rollout)."""
    w = rollout_setup()
    w.sg = w.envs["sg-test"]
    release_publish(version=w.profile[1], environment=w.sg, actor=w.ops)
    release_publish(version=w.strategy[3], environment=w.sg, actor=w.ops)
    w.token = runtime_token(w.sg, capabilities=("config:read", "traces:write"))
    return w


def v3_with(w, **changes):
    """A new frozen version of the strategy: v3's body with `changes` (none: v3 re-frozen)."""
    body = copy.deepcopy(w.strategy[3].body)
    body.update(changes)
    return frozen_version(w.strategy[3].document, body, actor=w.ops)


def roll_out(w, version, steps: list[dict]) -> Rollout:
    return rollout_start(version=version, environment=w.sg, actor=w.ops, plan=steps)


@pytest.fixture
def console(world, console_with_stream):
    return console_with_stream  # after the world: the servers read it


@pytest.fixture
def guards_every(settings, tmp_path):
    """Start a worker running the beat, its guards judged every `seconds` (the default 30 is
    production's); stopped after the test."""
    with contextlib.ExitStack() as workers:

        def start(seconds: float) -> None:
            workers.enter_context(
                celery_worker(
                    level="WARNING",
                    beat_schedule=tmp_path / "beat-schedule",
                    CACHE_PREFIX=settings.CACHES["default"]["KEY_PREFIX"],
                    ROLLOUTS_EVALUATE_SECONDS=str(int(seconds)),
                )
            )

        yield start


def runtime(world, console, tmp_path, sims, *extra: str, interval: float, requests=None):
    sim = RuntimeSim(
        console_url=console.web.url,
        token=world.token,
        poll=60.0,  # only the config stream explains a change heard within a second
        interval=interval,
        requests=requests,
        cache_dir=tmp_path / "runtime",
        log_path=tmp_path / "runtime.log",
        extra_args=("--flush-interval", "0.2", *extra),
    )
    sims.append(sim)
    sim.start()
    return sim


def rollout_now(rollout: Rollout) -> Rollout:
    return Rollout.objects.get(pk=rollout.pk)


def test_rollout__4000_token_version__paired_guard_rolls_back_in_first_step__v3_served_within_1s(
    world, console, guards_every, sims, tmp_path, client
):
    # Given the runtime serving v3 at 5 requests a second, each request its own task
    guards_every(30)  # the beat's real period
    sim = runtime(world, console, tmp_path, sims, "--tasks", "1000000", interval=0.2)
    assert wait_until(lambda: any(line["strategy_version"] == 3 for line in sim.lines), 20, 0.1)

    # When a version equal to v3 but with a 4000-token budget is rolled out 10% → 50% → 100%
    budget = {**world.strategy[3].body["budget"], "max_input_tokens": 4000}
    rollout = roll_out(world, v3_with(world, budget=budget), plan(120, 120, 120))
    assert rollout.state == "running"

    # Then the paired guard rolls it back within the first step
    assert wait_until(lambda: rollout_now(rollout).state != "running", 90, 0.2), rollout_now(
        rollout
    ).guards
    rollout.refresh_from_db()
    assert (rollout.state, rollout.ended_by, rollout.step) == ("rolled_back", "guard:paired", 0)
    in_rollout = [line for line in sim.lines if line.get("rollout") == rollout.key]
    assert {line["arm"] for line in in_rollout} == {"new", "old"}
    # every request compared both versions on the same candidates: the new one's were over
    # budget (v3's shadow or live was ready)
    assert {(line["arm"], line["status"]) for line in in_rollout} == {
        ("new", "budget_exceeded"),
        ("old", "ready"),
    }
    # … with its evidence: counts, the bound and five request ids the runtime answered
    evidence = rollout.evidence
    assert evidence["guard"] == "paired" and evidence["state"] == "breach"
    assert len(evidence["request_ids"]) == 5
    assert set(evidence["request_ids"]) <= {line["request_id"] for line in in_rollout}
    audit = AuditRecord.objects.get(action="rollout.rollback")
    assert audit.actor_label == "guard:paired"
    assert audit.after["evidence"]["request_ids"] == evidence["request_ids"]
    client.force_login(world.ops)
    page = client.get(f"/rollouts/{rollout.key}/", follow=True).content.decode()
    assert 'Evidence: <span title="the paired guard">same requests, both versions</span>' in page
    assert "The new version (v" in page and "did worse than the current version (v" in page
    assert all(request_id in page for request_id in evidence["request_ids"])

    # … at most two evaluation periods after the breach was in the traffic (its 5th request)
    breach_at = in_rollout[4]["t"]
    ended_at = rollout.ended_at.timestamp()
    print(f"\nbreach → rollback committed: {ended_at - breach_at:.1f} s (beat every 30 s)")
    assert ended_at - breach_at <= 60.0

    # … and the runtime serves v3 to everyone within a second of the rollback
    assert wait_until(lambda: any(line["t"] > ended_at + 1.5 for line in sim.lines), 10, 0.1)
    after = [line for line in sim.lines if line["t"] > ended_at]
    first_v3 = next(i for i, line in enumerate(after) if line["rollout"] is None)
    assert all(
        line["rollout"] is None and line["strategy_version"] == 3 for line in after[first_v3:]
    )
    served_in = after[first_v3]["t"] - ended_at
    print(f"rollback → the runtime serves v3: {served_in * 1000:.0f} ms")
    assert served_in <= 1.0


def test_rollout__a_a_over_10000_requests__no_rollback_no_pause_units_keep_their_arm(
    world, console, guards_every, sims, tmp_path
):
    # Given v3 re-frozen as v4, rolled out 10% → 50% → 100% with short bakes, judged every 2 s
    guards_every(2)
    rollout = roll_out(world, v3_with(world), plan(15, 15, 3600))

    # When a runtime answers 10,000 requests of 2,500 tasks
    sim = runtime(
        world, console, tmp_path, sims, "--tasks", "2500", interval=0.004, requests=10_000
    )
    assert sim.wait_event("stopped", 240) is not None, sim.noise[-5:]
    assert wait_until(
        lambda: Trace.objects.filter(rollout_key=rollout.key).count() == 10_000, 30, 0.5
    ), Trace.objects.filter(rollout_key=rollout.key).count()
    time.sleep(5)  # two more judgements on everything stored

    # Then every request was part of the rollout, which passed its steps with no pause and
    # no rollback
    rollout.refresh_from_db()
    assert len(sim.lines) == 10_000 and all(line["rollout"] == rollout.key for line in sim.lines)
    actions = [entry["action"] for entry in rollout.log]
    assert "pause" not in actions and "rollback" not in actions, rollout.log
    assert (rollout.state, rollout.step) == ("running", 2), (rollout.log, rollout.guards)
    assert not AuditRecord.objects.filter(action__in=("rollout.pause", "rollout.rollback")).exists()
    # A/A: both arms decided alike on every request
    assert {line["status"] for line in sim.lines} == {"ready"}
    # … and a task, once served the new version, is never served the old one again
    arms = defaultdict(list)
    for line in sim.lines:
        arms[line["task"]].append(line["arm"])
    switched = [
        t for t, seen in arms.items() if "new" in seen and "old" in seen[seen.index("new") :]
    ]
    assert not switched
    assert {arm for seen in arms.values() for arm in seen} == {"new", "old"}
    print(f"\nA/A: 10,000 requests, {len(arms)} tasks; steps {[e['action'] for e in rollout.log]}")


def test_rollout__order_provider_failing_30_percent__paused_naming_it_never_rolled_back(
    world, console, guards_every, sims, tmp_path
):
    # Given a good rollout (v3 re-frozen), judged every 2 s
    guards_every(2)
    rollout = roll_out(world, v3_with(world), plan(600, 600, 600))

    # When the order provider fails 30% of calls, in both versions alike
    runtime(
        world, console, tmp_path, sims, "--tasks", "1000000", "--fail-source",
        "order_delivery:0.3", interval=0.01,
    )  # fmt: skip

    # Then the rollout pauses, naming the provider, and nothing is rolled back
    assert wait_until(lambda: rollout_now(rollout).state != "running", 120, 0.5), rollout_now(
        rollout
    ).guards
    rollout.refresh_from_db()
    assert rollout.state == "paused" and rollout.log[-1]["actor"] == "guard:attribution", (
        rollout.log
    )
    assert rollout.evidence["guard"] == "attribution" and len(rollout.evidence["request_ids"]) == 5
    assert rollout.end_reason.startswith(
        "The order_delivery provider returned nothing for both versions in 3"
    )
    assert "for both versions" in rollout.end_reason
    assert "rollback" not in [entry["action"] for entry in rollout.log]
    assert not AuditRecord.objects.filter(action="rollout.rollback").exists()
    print(f"\npaused: {rollout.end_reason}")


# --- item 4: the paired watch after completion -----------------------------------------------
WATCH_SHARE = 0.5


def test_watch__worse_version_completed__paired_guard_warns__never_rolls_back(
    world, console, guards_every, sims, tmp_path
):
    # Given a runtime that applies watches, and a 4000-token copy of v3 rolled out and finished
    manifest_record(
        environment=world.sg,
        body=manifest_body(handlers=["general_policy_only"], features=["shadow", "split", "watch"]),
    )
    world.sg.watch_share = WATCH_SHARE
    world.sg.save(update_fields=["watch_share"])
    budget = {**world.strategy[3].body["budget"], "max_input_tokens": 4000}
    new = v3_with(world, budget=budget)
    rollout = roll_out(world, new, plan(3600, 3600, 3600))
    rollout = rollout_finish(rollout=rollout, actor=world.ops, reason="looked fine")
    assert rollout.watching
    guards_every(2)

    # When the runtime answers requests of many tasks
    sim = runtime(world, console, tmp_path, sims, "--tasks", "1000000", interval=0.05)

    # Then the paired guard warns …
    assert wait_until(lambda: rollout_now(rollout).watch_warning, 120, 0.2), rollout_now(
        rollout
    ).guards
    rollout.refresh_from_db()
    warning = rollout.watch_warning
    assert warning["guard"] == "paired" and warning["state"] == "breach"
    assert AuditRecord.objects.get(action="rollout.watch_warn").actor_label == "guard:paired"
    # … and nothing is rolled back: the new version stays live, the watch runs on
    assert rollout.state == "completed" and rollout.watching
    live = Release.objects.get(document=new.document, environment=world.sg)
    assert live.version_id == new.pk
    # Everyone was served the new version; the sampled tasks ran v3 beside it, the rest nothing
    lines = [line for line in sim.lines if line["strategy_version"] is not None]
    assert {line["strategy_version"] for line in lines} == {new.number}
    watched = [line for line in lines if line["rollout"] == rollout.key]
    assert {(line["arm"], line["shadow_version"]) for line in watched} == {("new", 3)}
    assert all(line["shadow_version"] is None for line in lines if line["rollout"] is None)
    assert 0.3 < len(watched) / len(lines) < 0.7, (len(watched), len(lines))
    # The evidence: five of the sampled requests, to open
    assert len(warning["request_ids"]) == 5
    assert set(warning["request_ids"]) <= {line["request_id"] for line in watched}

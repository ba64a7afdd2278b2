"""The demo traffic applies a staged rollout as an SDK runtime does: every request goes
through ``context_runtime.rollouts.serve`` (never a copy of the assignment), so its trace
serves its arm's version, runs the other arm as the shadow and carries the rollout block;
a payload without ``rollouts`` (an older console) gives the traces it gave before."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from context_runtime.client import ConfigSnapshot
from context_runtime.rollouts import assign_arm

from console.demo import traffic
from tests.factories.documents import strategy_body

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
V3 = strategy_body(optional=["applicable_policy", "recent_dialogue"])
V4 = strategy_body(
    optional=["applicable_policy", "recent_dialogue"],
    budget={"max_input_tokens": 2500, "reserve_output_tokens": 800},
)


def payload(rollouts=None) -> dict:
    built = {
        "agent": traffic.AGENT,
        "environment": "sg-test",
        "etag": '"r1-demo"',
        "profile": None,
        "strategies": {traffic.STRATEGY: {"version": 3, "body": V3}},
        "shadow": {},
    }
    if rollouts is not None:
        built["rollouts"] = rollouts
    return built


def traces(config, count: int = 400):
    rng = random.Random(23)
    out = []
    for n in range(count):
        scenario, request = traffic.pick(rng, n)
        out.append(
            traffic.run(
                scenario, config=config, request_id=f"d-{n}", occurred_at=NOW, request=request
            )
        )
    return out


def test_demo_traffic__rollout__each_task_served_its_arm__other_arm_as_shadow():
    rollout = {"id": "ro-3", "version": 4, "body": V4, "share": 0.5, "unit": "task", "step": 1}
    config = ConfigSnapshot.from_payload(payload({traffic.STRATEGY: rollout}))

    sent = traces(config)

    arms = []
    for trace in sent:
        arm = assign_arm("ro-3", 0.5, trace.task.id)
        arms.append(arm)
        served, other = (4, 3) if arm == "new" else (3, 4)
        assert (trace.rollout.id, trace.rollout.arm, trace.rollout.step) == ("ro-3", arm, 1)
        assert (trace.documents[traffic.STRATEGY], trace.shadow.version) == (served, other)
        assert trace.shadow.sources_not_fetched == ()
    assert 150 < arms.count("new") < 250
    # The smaller budget (v4) is worse on some requests, seen from both arms.
    assert {t.rollout.arm for t in sent if t.status != t.shadow.status} == {"new", "old"}


def test_demo_traffic__payload_without_rollouts__as_before():
    sent = traces(payload(), count=100)

    assert {(t.rollout, t.shadow, t.documents[traffic.STRATEGY]) for t in sent} == {(None, None, 3)}
    # A payload (not a snapshot) is taken as well.
    assert traces(ConfigSnapshot.from_payload(payload()), count=100) == sent

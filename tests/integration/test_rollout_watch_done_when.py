"""Issue 23 item 4 end to end with real processes (the fixtures of test_rollout_done_when: the
console's web and stream servers, a worker running the beat, the SDK in another process): a
4000-token copy of v3 rolled out and finished is live; during its paired watch the runtime
serves it to everyone and runs v3 as shadow for the sampled tasks only; the paired guard, at
the beat's pace, warns with five of those requests — and nothing is rolled back."""

from __future__ import annotations

import pytest

from console.kernel.models import AuditRecord
from strategies.catalog.services import manifest_record
from strategies.releases.models import Release
from strategies.releases.services import rollout_finish
from tests.factories import manifest_body
from tests.integration.test_rollout_done_when import (  # noqa: F401 - fixtures
    console,
    guards_every,
    plan,
    roll_out,
    rollout_now,
    runtime,
    v3_with,
    world,
)
from tests.runtime_sim import wait_until

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]
SHARE = 0.5


def test_watch__worse_version_completed__paired_guard_warns__never_rolls_back(
    world, console, guards_every, sims, tmp_path
):
    # Given a runtime that applies watches, and a 4000-token copy of v3 rolled out and finished
    manifest_record(
        environment=world.sg,
        body=manifest_body(
            handlers=["general_policy_only"], features=["shadow", "split", "watch"]
        ),
    )
    world.sg.watch_share = SHARE
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

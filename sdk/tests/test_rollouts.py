"""Staged rollouts on the runtime's side (``context_runtime.rollouts``; docs/runtime-contract.md
§1 ``rollouts``, §3 ``rollout``): the stable assignment, what a request serves, and how the
config client takes the payload's ``rollouts`` — an older console's payload without it reads
as before, a malformed entry is left out (logged) and that key serves its live version."""

from __future__ import annotations

import copy
import hashlib
import logging
import math

import msgspec
import pytest
from context_runtime import wire
from context_runtime.client import ConfigClient, ConfigSnapshot, Rollout
from context_runtime.engine import CandidateItem, Strategy, select
from context_runtime.rollouts import (
    Serving,
    assign_arm,
    bucket,
    request_arm,
    serve,
    unit_value,
)
from fake_console import AGENT, PAYLOAD, TOKEN

KEY = "after_sales_consultation"
V3 = PAYLOAD["strategies"][KEY]["body"]
# The new version: v3 with a smaller budget and an optional source v3 does not read.
V4 = {**V3, "optional": ["recent_dialogue", "memory"], "budget": {"max_input_tokens": 4000}}
UNITS = 10_000
SHARES = (0.0, 0.1, 0.5, 1.0)  # the staged template: shadow → 10 % → 50 % → 100 %
# Two-sided 1e-5 normal quantile: a fair hash lands outside it once in 100,000 rollouts.
Z = 4.42


def entry(**changes) -> dict:
    base = {"id": "ro-7", "version": 4, "body": V4, "share": 0.5, "unit": "task", "step": 2}
    return {**base, **changes}


def payload(rollouts=None, **fields) -> dict:
    built = copy.deepcopy(PAYLOAD)
    if rollouts is not None:
        built["rollouts"] = rollouts
    built.update(fields)
    return built


@pytest.fixture
def snapshot_of(config):
    """``snapshot_of(payload)``: the snapshot a ConfigClient builds from it (a fake console)."""
    return lambda served: config(served).snapshot()


# ---------------------------------------------------------------- the assignment


def test_bucket__the_contracts_hash__pinned_values():
    # docs/runtime-contract.md §1 gives these, for implementations in other languages.
    assert bucket("ro-7", "T9") == 0.4194118814330054
    assert bucket("ro-7", "shop-a/user-417") == 0.023319532978345846
    digest = hashlib.sha256(b"ro-7\x00T9").digest()
    assert bucket("ro-7", "T9") == int.from_bytes(digest[:8], "big") / 2**64


def test_assignment__10000_units__keep_their_arm_as_the_share_grows__realised_share_bounded():
    units = [f"T{n}" for n in range(UNITS)]
    arms = {share: [assign_arm("ro-7", share, unit) for unit in units] for share in SHARES}

    for share in SHARES:
        new = arms[share].count("new")
        bound = Z * math.sqrt(share * (1 - share) / UNITS)
        assert abs(new / UNITS - share) <= bound, (share, new)
    assert arms[0.0].count("new") == 0 and arms[1.0].count("old") == 0
    # Share only grows: a unit once on new stays on new at every later step.
    for earlier, later in zip(SHARES, SHARES[1:], strict=False):
        moved_back = [
            u
            for u, a, b in zip(units, arms[earlier], arms[later], strict=True)
            if (a, b) == ("new", "old")
        ]
        assert moved_back == []


def test_assignment__independent_between_rollouts():
    units = [f"T{n}" for n in range(UNITS)]
    in_a = {u for u in units if assign_arm("ro-7", 0.5, u) == "new"}
    in_b = {u for u in units if assign_arm("ro-8", 0.5, u) == "new"}

    both = len(in_a & in_b) / UNITS
    assert abs(both - 0.25) <= Z * math.sqrt(0.25 * 0.75 / UNITS)


@pytest.mark.parametrize(
    ("unit", "task_id", "principal", "expected"),
    [
        ("task", "T9", "p-1", "T9"),
        ("principal", "T9", "p-1", "p-1"),
        ("task", None, "p-1", "req-1"),
        ("task", "", "p-1", "req-1"),
        ("principal", "T9", "", "req-1"),
        ("principal", "T9", None, "req-1"),
    ],
)
def test_unit_value__the_traces_value__request_id_when_missing(unit, task_id, principal, expected):
    assert unit_value(unit, task_id=task_id, principal=principal, request_id="req-1") == expected


# ---------------------------------------------------------------- what a request serves


class Snap:
    """A snapshot as ``serve`` reads it (any object with these methods will do)."""

    def __init__(self, live=None, shadow=None, rollout=None):
        self._live, self._shadow, self._rollout = live, shadow, rollout
        self.documents = {"profile": 7, KEY: 3}

    def strategy(self, key):
        return self._live

    def shadow(self, key):
        return self._shadow

    def rollout(self, key):
        return self._rollout


def documents():
    from context_runtime.client import Document

    v3 = Document(key=KEY, version=3, body=V3)
    v4 = Document(key=KEY, version=4, body=V4)
    return v3, v4


@pytest.mark.parametrize("share", SHARES)
def test_serve__each_arm_serves_its_version__the_other_runs_as_shadow(share):
    v3, v4 = documents()
    snap = Snap(live=v3, rollout=Rollout(id="ro-7", document=v4, share=share, unit="task", step=1))

    served = [serve(snap, KEY, request_id=f"r{n}", task_id=f"T{n}") for n in range(2_000)]

    for n, s in enumerate(served):
        arm = assign_arm("ro-7", share, f"T{n}")
        assert s.rollout == wire.TraceRollout(id="ro-7", arm=arm, step=1)
        assert (s.document, s.shadow) == ((v4, v3) if arm == "new" else (v3, v4))
        assert s.documents(snap) == {"profile": 7, KEY: s.document.version}
    arms = {s.rollout.arm for s in served}
    assert arms == {"old"} if share == 0.0 else {"new"} if share == 1.0 else {"new", "old"}


@pytest.mark.parametrize("phase", ["rollout", "watch"])
@pytest.mark.parametrize("unit", ["task", "principal"])
def test_serve__reports_the_arm_request_arm_gives__what_the_console_checks(phase, unit):
    """The console refuses a trace whose arm is not `request_arm`'s for its unit (docs/
    rollout-evidence.md): what serve reports must be exactly that, in both phases, for
    units given and missing."""
    v3, v4 = documents()
    entry = Rollout(id="ro-7", document=v4, share=0.3, unit=unit, step=1, phase=phase)
    snap = Snap(live=v3, rollout=entry)
    for n in range(2_000):
        task_id, principal = (f"T{n}", "") if n % 3 else (None, f"shop-{n}" if n % 2 else "")
        served = serve(snap, KEY, request_id=f"r{n}", task_id=task_id, principal=principal)
        value = unit_value(unit, task_id=task_id, principal=principal, request_id=f"r{n}")
        arm = request_arm("ro-7", share=0.3, unit=value, phase=phase)
        assert (served.rollout.arm if served.rollout else None) == arm


def test_serve__unit_missing__each_request_its_own_unit():
    v3, v4 = documents()
    snap = Snap(live=v3, rollout=Rollout(id="ro-7", document=v4, share=0.5, unit="task", step=1))

    arms = [serve(snap, KEY, request_id=f"r{n}", task_id=None).rollout.arm for n in range(400)]

    assert arms == [assign_arm("ro-7", 0.5, f"r{n}") for n in range(400)]
    assert 100 < arms.count("new") < 300


def test_serve__no_rollout__live_and_the_shadow_release_as_before():
    v3, v4 = documents()

    assert serve(Snap(live=v3), KEY, request_id="r") == Serving(KEY, v3, None, None)
    assert serve(Snap(live=v3, shadow=v4), KEY, request_id="r") == Serving(KEY, v3, v4, None)
    assert serve(Snap(), KEY, request_id="r") == Serving(KEY, None, None, None)


def test_serve__a_snapshot_without_rollout_method__serves_live():
    v3, _ = documents()

    class Old:
        documents = {KEY: 3}

        def strategy(self, key):
            return v3

    assert serve(Old(), KEY, request_id="r") == Serving(KEY, v3, None, None)


def test_plain_engine_path__served_arm_selects__other_arm_shadow__sources_not_fetched():
    """A runtime calling the engine itself: serve, select with the served version on the
    providers it reads, run the shadow; the new arm reads ``memory``, which old did not ask."""
    v3, v4 = documents()
    candidates = [
        CandidateItem(id="task_state:T9", source="task_state", size=300),
        CandidateItem(id="order:A1042", source="order_delivery", size=3_000),
        CandidateItem(id="P7", source="applicable_policy", size=1_500),
        CandidateItem(id="chat:1", source="recent_dialogue", size=200, relevance=0.9),
        CandidateItem(id="memory:1", source="memory", size=10),
    ]
    for share, arm in ((0.0, "old"), (1.0, "new")):
        snap = Snap(
            live=v3, rollout=Rollout(id="ro-7", document=v4, share=share, unit="task", step=0)
        )
        s = serve(snap, KEY, request_id="r1", task_id="T9")
        strategy = Strategy.from_body(s.document.body)
        fetched = [c for c in candidates if c.source in strategy.sources]
        live = select(strategy=strategy, candidates=fetched, fixed_input_tokens=2_000)

        shadow = s.run_shadow(live)

        assert s.rollout.arm == arm
        assert shadow.version == s.shadow.version
        if arm == "old":  # v3 served: the new version decided without memory
            assert shadow.sources_not_fetched == ("memory",)
            assert live.status == "ready" and shadow.status == "budget_exceeded"
        else:
            assert shadow.sources_not_fetched == ()
            assert live.status == "budget_exceeded" and shadow.status == "ready"


# ---------------------------------------------------------------- the config client


def test_client__payload_with_rollout__snapshot_exposes_it(snapshot_of):
    snap = snapshot_of(payload({KEY: entry()}))

    rollout = snap.rollout(KEY)
    assert (rollout.id, rollout.version, rollout.share, rollout.unit, rollout.step) == (
        "ro-7",
        4,
        0.5,
        "task",
        2,
    )
    assert rollout.document.body == V4 and rollout.key == KEY
    assert snap.strategy(KEY).version == 3  # the control version stays live
    assert snap.documents[KEY] == 3
    assert snap.rollout("small_talk") is None
    with pytest.raises(TypeError):
        rollout.document.body["budget"] = {}  # read-only, as every served body


def test_client__older_console_without_rollouts__no_rollout(snapshot_of):
    for served in (payload(), payload({}), {**payload(), "rollouts": None}):
        snap = snapshot_of(served)

        assert snap.rollouts == {} and snap.rollout(KEY) is None
        assert snap.strategy(KEY).version == 3


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (entry(share=1.5), "share"),
        (entry(share=-0.1), "share"),
        (entry(unit="tenant"), "unit"),
        ({k: v for k, v in entry().items() if k != "body"}, "body"),
        (entry(body={**V4, "budget": {"max_input_tokens": -5}}), "max_input_tokens"),
        (entry(version="4"), "version"),
        (entry(id=""), "id"),
        ("ro-7", "object"),
    ],
)
def test_client__malformed_rollout__that_key_serves_live_with_a_warning(
    snapshot_of, caplog, bad, says
):
    good = {**entry(id="ro-9"), "body": PAYLOAD["strategies"]["small_talk"]["body"]}
    with caplog.at_level(logging.WARNING, logger="context_runtime.client"):
        snap = snapshot_of(payload({KEY: bad, "small_talk": good}))

    assert snap.rollout(KEY) is None and snap.strategy(KEY).version == 3
    assert snap.rollout("small_talk").id == "ro-9"  # the other key's rollout still applies
    warned = [
        r.getMessage() for r in caplog.records if f"rollouts.{KEY} is ignored" in r.getMessage()
    ]
    assert len(warned) == 1 and says in warned[0], warned


def test_client__rollout_of_a_key_with_nothing_live__ignored(snapshot_of, caplog):
    with caplog.at_level(logging.WARNING, logger="context_runtime.client"):
        snap = snapshot_of(payload({"not_released": entry()}))

    assert snap.rollouts == {}
    assert any("rollouts.not_released is ignored" in r.getMessage() for r in caplog.records)


def test_client__rollouts_not_a_map__ignored(snapshot_of, caplog):
    with caplog.at_level(logging.WARNING, logger="context_runtime.client"):
        snap = snapshot_of(payload(["ro-7"]))

    assert snap.rollouts == {} and snap.strategy(KEY).version == 3
    assert any("rollouts is not a map" in r.getMessage() for r in caplog.records)


def test_client__shadow_sent_beside_a_rollout__the_rollout_runs_the_shadow(snapshot_of):
    # The console sends no shadow for a key with a rollout; one that does is not served twice.
    snap = snapshot_of(payload({KEY: entry()}, shadow={KEY: {"version": 5, "body": V3}}))

    assert snap.shadow(KEY) is None and snap.rollout(KEY).version == 4


def test_client__share_changes_under_the_same_etag__taken_as_a_change(console):
    """A share change is a change of what the runtime serves: even a console that kept its
    ETag (inconsistent) is followed and counted, as for a strategy change."""
    changes = []
    client = ConfigClient(console.url, TOKEN, AGENT, timeout=1.0, on_change=changes.append)
    console.publish(lambda p: p.update(rollouts={KEY: entry(share=0.1)}))
    assert client.refresh_now()
    etag = client.snapshot().etag
    console.config_body = msgspec.json.encode(
        {**payload({KEY: entry(share=0.5, step=3)}), "etag": etag}
    )

    assert client.refresh_now()

    rollout = client.snapshot().rollout(KEY)
    assert (client.snapshot().etag, rollout.share, rollout.step) == (etag, 0.5, 3)
    assert [c.rollout(KEY).share for c in changes] == [0.1, 0.5]
    assert client.status()["etag_conflicts"] == 1


def test_snapshot_from_payload__checked_as_the_client_does__rollout_applied():
    served = payload({KEY: entry(), "small_talk": entry(share=3)}, etag='"r1"')
    snap = ConfigSnapshot.from_payload(served)

    assert snap.agent == AGENT and snap.resolution.reason == "fresh"
    assert snap.rollout(KEY).version == 4 and snap.rollout("small_talk") is None
    with pytest.raises(ValueError, match="strategies"):
        ConfigSnapshot.from_payload({**served, "strategies": "v3"})

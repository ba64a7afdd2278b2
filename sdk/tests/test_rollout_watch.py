"""The paired watch after a completed rollout on the runtime's side (docs/runtime-contract.md
§1 ``rollouts`` entries of ``phase`` ``watch``, §3 ``rollout``): everyone is served the live
(new) version; the units whose bucket is below the entry's share also run the previous version
as shadow and report ``rollout {id, arm: "new", step}``; the others run no shadow and report
no rollout — with no extra provider, model or tool call."""

from __future__ import annotations

import copy
import math

from context_runtime import wire
from context_runtime.client import Document, Rollout
from context_runtime.manifest import FEATURES, WATCH
from context_runtime.rollouts import Serving, bucket, serve, watched
from fake_console import PAYLOAD
from test_rollouts import Snap

KEY = "after_sales_consultation"
V3 = PAYLOAD["strategies"][KEY]["body"]
V4 = {**V3, "optional": ["recent_dialogue", "memory"]}  # the new, live version reads more
UNITS = 10_000
Z = 4.42  # two-sided 1e-5 normal quantile


def watch_snap(share=0.1):
    v3 = Document(key=KEY, version=3, body=V3)
    v4 = Document(key=KEY, version=4, body=V4)
    entry = Rollout(id="ro-7", document=v3, share=share, unit="task", step=3, phase="watch")
    return Snap(live=v4, rollout=entry), v3, v4


def test_sdk__declares_the_watch_feature():
    assert WATCH in FEATURES


def test_serve_watch__10000_units__about_the_share_sampled__stable_per_unit():
    snap, v3, v4 = watch_snap()

    first = [serve(snap, KEY, request_id=f"r{n}", task_id=f"T{n}") for n in range(UNITS)]
    again = [serve(snap, KEY, request_id=f"x{n}", task_id=f"T{n}") for n in range(UNITS)]

    sampled = [s for s in first if s.rollout is not None]
    assert abs(len(sampled) / UNITS - 0.1) <= Z * math.sqrt(0.1 * 0.9 / UNITS)
    assert [s.rollout for s in first] == [s.rollout for s in again]  # a unit stays sampled
    for n, s in enumerate(first):
        assert s.document == v4  # everyone is served the live (new) version
        if bucket("ro-7", f"T{n}") < 0.1:
            assert s == Serving(KEY, v4, v3, wire.TraceRollout(id="ro-7", arm="new", step=3))
        else:
            assert s == Serving(KEY, v4, None, None)


def test_serve_watch__share_zero__no_unit_sampled():
    snap, _, v4 = watch_snap(share=0.0)

    assert not watched("ro-7", 0.0, "T1")
    assert {serve(snap, KEY, request_id=f"r{n}").rollout for n in range(500)} == {None}


def test_client__watch_entry__snapshot_keeps_live_and_the_phase(config):
    payload = copy.deepcopy(PAYLOAD)
    payload["strategies"][KEY] = {"version": 4, "body": V4}
    payload["rollouts"] = {
        KEY: {
            "id": "ro-7",
            "phase": "watch",
            "version": 3,
            "body": V3,
            "share": 0.1,
            "unit": "task",
            "step": 3,
        }  # fmt: skip
    }

    snap = config(payload).snapshot()

    assert snap.strategy(KEY).version == 4
    assert (snap.rollout(KEY).phase, snap.rollout(KEY).version) == ("watch", 3)


def test_client__entry_without_phase__a_rollout_as_before(config):
    payload = copy.deepcopy(PAYLOAD)
    payload["rollouts"] = {
        KEY: {"id": "ro-7", "version": 4, "body": V4, "share": 0.5, "unit": "task", "step": 1}
    }

    assert config(payload).snapshot().rollout(KEY).phase == "rollout"

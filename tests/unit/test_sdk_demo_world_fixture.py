"""The SDK's tests validate and diff the demo world from a JSON copy (they run without the
console); that copy must stay what console.demo.data holds."""

import json
from pathlib import Path

from console.demo.data import BANK_PROFILE, DEMO_MANIFEST

SDK_DEMO_WORLD = (
    Path(__file__).resolve().parents[2] / "sdk" / "tests" / "fixtures" / "demo_world.json"
)


def test_sdk_demo_world_fixture__equals_console_demo_data():
    fixture = json.loads(SDK_DEMO_WORLD.read_text())

    # On a change to console.demo.data, rewrite the JSON from it (same keys, indent=2).
    assert fixture == {"bank_profile": BANK_PROFILE, "demo_manifest": DEMO_MANIFEST}

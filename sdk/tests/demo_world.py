"""The demo world's fixed bodies, for SDK tests that cannot import the console.

``fixtures/demo_world.json`` is a copy of ``console.demo.data`` (the Bank profile and the
manifest that implements everything the demo uses); the console's
``tests/unit/test_sdk_demo_world_fixture.py`` fails when the two differ.
"""

from __future__ import annotations

import json
from pathlib import Path

_WORLD = json.loads((Path(__file__).parent / "fixtures" / "demo_world.json").read_text())

BANK_PROFILE: dict = _WORLD["bank_profile"]
DEMO_MANIFEST: dict = _WORLD["demo_manifest"]

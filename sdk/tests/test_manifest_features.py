"""The manifest's ``features`` (docs/runtime-contract.md §2): a runtime built on the SDK
declares shadow support, one that says otherwise declares none, and a manifest from before
the field reads as no features (the console refuses shadow releases to it)."""

from __future__ import annotations

import pytest
from context_runtime.manifest import FEATURES, SHADOW, SPLIT, WATCH, Manifest, validate_manifest
from context_runtime.manifest_report import Registry

BASE = {
    "providers": ["task_state"],
    "tools": [],
    "handlers": [],
    "sections": [{"key": "high_level_profile", "block": "user_context", "sensitive": False}],
    "switches": [],
}


def test_registry__default__declares_shadow_split_and_watch_support():
    registry = Registry()
    registry.register_provider("task_state")

    body = registry.manifest_body("bank-assistant 2026.12.1")

    assert body["features"] == ["shadow", "split", "watch"]
    assert registry.manifest().supports(SHADOW) and registry.manifest().supports(SPLIT)
    assert registry.manifest().supports(WATCH)
    assert FEATURES == (SHADOW, SPLIT, WATCH)


def test_registry__runtime_without_the_assembly__declares_no_features():
    registry = Registry(features=())
    registry.register_provider("task_state")

    body = registry.manifest_body("custom-runtime 1.0")

    assert "features" not in body
    assert not registry.manifest().supports(SHADOW)


def test_manifest__old_wire_form_without_features__supports_nothing_and_round_trips():
    manifest = Manifest.from_dict(dict(BASE))

    assert not manifest.supports(SHADOW)
    # An old manifest's wire form is unchanged, so the console's content hash is too.
    assert manifest.to_dict() == {**BASE, "sections": BASE["sections"]}


def test_manifest__unknown_feature__kept_for_a_newer_runtime():
    manifest = Manifest.from_dict({**BASE, "features": ["split", "shadow", "mirror_v9"]})

    assert manifest.supports("split") and manifest.supports(SHADOW)
    assert manifest.to_dict()["features"] == ["mirror_v9", "shadow", "split"]


@pytest.mark.parametrize(
    ("features", "path", "code"),
    [
        ("shadow", "features", "invalid_type"),
        (["shadow", "shadow"], "features[1]", "duplicate"),
        ([""], "features[0]", "empty"),
    ],
)
def test_validate_manifest__malformed_features__refused_at_the_field(features, path, code):
    findings = validate_manifest({**BASE, "features": features})

    assert [(f.path, f.code) for f in findings] == [(path, code)]


def test_registry__bad_feature_name__refused_at_construction():
    with pytest.raises(ValueError, match="feature name"):
        Registry(features=("",))

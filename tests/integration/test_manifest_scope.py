"""A manifest describes the whole environment (docs/runtime-contract.md "Authentication", §2):
only a token for every agent may write it. An agent-scoped `manifest:write` token cannot
declassify a sensitive section for the other agents' operators."""

from __future__ import annotations

import json

import pytest

from strategies.catalog.models import Manifest
from tests.factories import (
    OTHER_AGENT,
    SAMPLE_AGENT,
    AgentFactory,
    EnvironmentFactory,
    bearer,
    legacy_runtime_token,
    manifest_body,
    runtime_token,
)

MANIFEST = "/api/v1/runtime/manifest"

pytestmark = pytest.mark.django_db


@pytest.fixture
def sg_test(db):
    """Two agents; sg-test, whose runtime reported every known section as the console knows it."""
    AgentFactory(key=SAMPLE_AGENT)
    AgentFactory(key=OTHER_AGENT)
    return EnvironmentFactory(key="sg-test", manifest=manifest_body())


def declassifying_manifest() -> str:
    """A manifest reporting every sensitive section as ordinary."""
    body = manifest_body()
    assert any(entry["sensitive"] for entry in body["sections"])
    for entry in body["sections"]:
        entry["sensitive"] = False
    return json.dumps(body)


def test_manifest_put__token_for_some_agents__403_nothing_written(client, sg_test):
    before = list(Manifest.objects.filter(environment=sg_test).values_list("pk", flat=True))
    lite_only = legacy_runtime_token(  # made before such a token was refused (400)
        sg_test,
        capabilities=("config:read", "manifest:write"),
        agents=[AgentFactory(key=OTHER_AGENT)],
    )

    response = client.put(
        MANIFEST,
        data=declassifying_manifest(),
        content_type="application/json",
        **bearer(lite_only),
    )

    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "forbidden"
    assert "all agents" in error["message"] and "environment" in error["message"]
    assert error["details"] == []
    assert list(Manifest.objects.filter(environment=sg_test).values_list("pk", flat=True)) == before


def test_manifest_put__token_for_every_agent__accepted(client, sg_test):
    every_agent = runtime_token(sg_test, capabilities=("manifest:write",))

    response = client.put(
        MANIFEST,
        data=declassifying_manifest(),
        content_type="application/json",
        **bearer(every_agent),
    )

    assert response.status_code == 200
    assert Manifest.objects.filter(environment=sg_test).count() == 2

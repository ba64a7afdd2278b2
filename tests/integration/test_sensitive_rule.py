"""One rule for sensitive sections, one answer: the editor, saving a draft, freezing and
publishing all treat a section as sensitive when the console knows it as sensitive or any
environment's runtime declares it so — a runtime that declares it harmless changes nothing."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from context_runtime.findings import FLAG

from console.kernel.errors import Forbidden
from console.kernel.models import AccessLogEntry
from strategies.catalog.models import Manifest
from strategies.documents import selectors as document_selectors
from strategies.documents import services as document_services
from strategies.documents.models import Document
from strategies.releases import services as releases
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    frozen_version,
    manifest_body,
    profile_body,
    user_with_grants,
)

PATH = "sections.user_context.state_of_mind"


@pytest.fixture
def world(db):
    """assistant_professional's profile at v1 (state_of_mind off); sg-test, whose runtime
    reports every known section; ops (operator: may not switch sensitive sections on) and
    admin (may)."""
    agent = AgentFactory(key="assistant_professional")
    return SimpleNamespace(
        agent=agent,
        sg_test=EnvironmentFactory(key="sg-test", manifest=manifest_body()),
        profile_v1=frozen_version(DocumentFactory(agent=agent, profile=True), profile_body()),
        ops=user_with_grants("ops", operator=agent),
        admin=user_with_grants("admin", admin=None),
    )


def _declassify_in(environment) -> None:
    """The environment's runtime reports state_of_mind as an ordinary section."""
    body = manifest_body(not_sensitive=["state_of_mind"])
    latest = Manifest.objects.filter(environment=environment).order_by("-version").first()
    Manifest.objects.create(
        environment=environment,
        version=latest.version + 1,
        body=body,
        content_hash=f"declassified-{environment.key}",
    )


def _with_state_of_mind(body: dict) -> dict:
    body = copy.deepcopy(body)
    body["sections"]["user_context"]["state_of_mind"] = True
    return body


def test_sensitive_rule__runtime_declares_a_known_section_harmless__editor_save_and_publish_agree(
    world,
):
    sg_test = world.sg_test
    _declassify_in(sg_test)
    profile = Document.objects.get(agent=world.agent, kind=Document.Kind.PROFILE)
    body = _with_state_of_mind(world.profile_v1.body)

    # The editor flags it as needing the permission, even against the declassifying runtime.
    report = document_selectors.document_validate(kind="profile", body=body, environment=sg_test)
    assert [(f["path"], f["severity"]) for f in report.flags] == [(PATH, FLAG)]

    # Saving it as an operator without the permission is refused at that path…
    with pytest.raises(Forbidden) as saving:
        document_services.draft_create(document=profile, body=body, actor=world.ops)
    # …and so is publishing a version that has it on (frozen by someone allowed to).
    version = document_services.version_freeze(
        draft=document_services.draft_create(document=profile, body=body, actor=world.admin),
        actor=world.admin,
    )
    with pytest.raises(Forbidden) as publishing:
        releases.release_publish(version=version, environment=sg_test, actor=world.ops)

    for refusal in (saving.value, publishing.value):
        assert refusal.code == "sensitive_section"
        assert [d["path"] for d in refusal.details] == [PATH]
    # Both refusals are in the access log, the same way.
    rows = AccessLogEntry.objects.filter(action="access.denied").order_by("id")
    assert [r.detail["capability"] for r in rows] == ["enable_sensitive", "enable_sensitive"]


def test_sensitive_rule__admin_with_the_permission__saves_and_publishes(world):
    sg_test = world.sg_test
    profile = Document.objects.get(agent=world.agent, kind=Document.Kind.PROFILE)
    body = _with_state_of_mind(world.profile_v1.body)
    draft = document_services.draft_create(document=profile, body=body, actor=world.admin)
    outcome = releases.release_publish(version=draft, environment=sg_test, actor=world.admin)
    assert outcome.release.version.body["sections"]["user_context"]["state_of_mind"] is True

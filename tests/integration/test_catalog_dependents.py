"""The catalog asks the jobs that build on it (strategies.catalog.dependents): a delete is
refused with every reason each job gives, in the order the catalog always listed them, and
what goes with a deleted agent or environment (drafts, documents, config payloads) goes."""

from __future__ import annotations

import pytest

from console.kernel.errors import Conflict
from strategies.catalog import services
from strategies.catalog.models import Agent, Environment
from strategies.delivery.models import ConfigPayload, Webhook
from strategies.documents.models import Document, Version
from strategies.releases.models import ApprovalRequest
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    DraftVersionFactory,
    EnvironmentFactory,
    FrozenVersionFactory,
    ReleaseFactory,
    TraceFactory,
    manifest_body,
    runtime_token,
    user_with_grants,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(db):
    return user_with_grants("boss", admin=None)


def _approval_request(version, environment, actor) -> ApprovalRequest:
    return ApprovalRequest.objects.create(
        document=version.document,
        environment=environment,
        version=version,
        content_hash=version.content_hash,
        requested_by=actor,
    )


def test_environment_delete__referred_to_by_every_job__refused_with_every_reason_in_order(admin):
    env = EnvironmentFactory(key="sg-test", manifest=manifest_body())
    agent = AgentFactory(key="assistant_returns")
    version = FrozenVersionFactory(document=DocumentFactory(agent=agent, key="returns"))
    ReleaseFactory(version=version, environment=env)
    TraceFactory(agent=agent, environment=env)
    runtime_token(env)
    _approval_request(version, env, admin)
    Webhook.objects.create(environment=env, url="http://127.0.0.1:9/", secret="s")

    with pytest.raises(Conflict) as refused:
        services.environment_delete(environment=env, actor=admin)

    assert refused.value.code == "in_use"
    assert [d["code"] for d in refused.value.details] == [
        "has_releases",
        "has_traces",
        "has_runtime_tokens",
        "has_manifests",
        "has_approval_requests",
        "has_webhooks",
    ]
    assert refused.value.message == (
        "The environment sg-test cannot be deleted: documents are live in it; its runtime sent "
        "traces; it has runtime tokens (revoked ones too: they are its history); its runtime "
        "reported a manifest; it has approval requests; it has webhooks. Archive it instead: "
        "it disappears from lists and pickers and keeps its history."
    )
    assert Environment.objects.filter(key="sg-test").exists()


def test_agent_delete__referred_to_by_every_job__refused_with_every_reason_in_order(admin):
    env = EnvironmentFactory(key="sg-test")
    agent = AgentFactory(key="assistant_returns")
    version = FrozenVersionFactory(document=DocumentFactory(agent=agent, key="returns"))
    ReleaseFactory(version=version, environment=env)
    TraceFactory(agent=agent, environment=env)
    _approval_request(version, env, admin)

    with pytest.raises(Conflict) as refused:
        services.agent_delete(agent=agent, actor=admin)

    assert refused.value.details == [
        {"path": "", "code": "has_releases", "message": "it has releases: documents live in an "
         "environment"},
        {"path": "", "code": "has_traces", "message": "its runtime sent traces"},
        {"path": "", "code": "has_frozen_versions", "message": "it has frozen versions, which "
         "are kept for good"},
        {"path": "", "code": "has_approval_requests", "message": "it has approval requests"},
    ]  # fmt: skip
    assert Agent.objects.filter(key="assistant_returns").exists()


def test_agent_delete__drafts_and_config_payloads__all_go_with_it(admin):
    env = EnvironmentFactory(key="sg-test")
    agent = services.agent_create(key="typo_agent", actor=admin)
    profile = Document.objects.get(agent=agent)
    assert (profile.kind, profile.key, profile.name) == ("profile", "profile", "Context profile")
    DraftVersionFactory(document=profile)
    DraftVersionFactory(document=DocumentFactory(agent=agent, key="returns"))
    ConfigPayload.objects.create(agent=agent, environment=env)

    services.agent_delete(agent=agent, actor=admin)

    assert not Agent.objects.filter(key="typo_agent").exists()
    assert not Document.objects.exists() and not Version.objects.exists()
    assert not ConfigPayload.objects.exists()


def test_environment_delete__config_payloads__go_with_it(admin):
    env = EnvironmentFactory(key="typo-env")
    ConfigPayload.objects.create(agent=AgentFactory(key="assistant_returns"), environment=env)

    services.environment_delete(environment=env, actor=admin)

    assert not Environment.objects.filter(key="typo-env").exists()
    assert not ConfigPayload.objects.exists()
    assert Agent.objects.filter(key="assistant_returns").exists()

"""Releases: publishing through the real service, release rows for reads, and the setup most
release tests share."""

from __future__ import annotations

from dataclasses import dataclass

import factory

from strategies.delivery.config import cache_clear_all
from strategies.releases.models import Release
from strategies.releases.services import approval_approve, release_publish
from tests.factories.documents import (
    SAMPLE_AGENT,
    STRATEGY_KEY,
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    FrozenVersionFactory,
    frozen_versions,
    manifest_body,
    profile_body,
    strategy_bodies_v1_to_v3,
    strategy_body,
)
from tests.factories.users import user_with_grants


def publish(version, environment, *, actor, approver=None, reason: str = ""):
    """Publish through `release_publish`; in a protected environment `approver` (a second
    person) approves it. Returns the live Release, or the ApprovalRequest still waiting."""
    outcome = release_publish(version=version, environment=environment, actor=actor, reason=reason)
    if outcome.approval is None:
        return outcome.release
    if approver is None:
        return outcome.approval
    return approval_approve(approval=outcome.approval, actor=approver)


class ReleaseFactory(factory.django.DjangoModelFactory):
    """A release row written directly: `version` live in `environment` (tests of reads; a
    publish goes through `publish`)."""

    class Meta:
        model = Release

    version = factory.SubFactory(FrozenVersionFactory)
    document = factory.SelfAttribute("version.document")
    environment = factory.SubFactory(EnvironmentFactory)
    revision = 1


def shadow_history(release, *spans) -> None:
    """Shadow starts and stops of `release`'s document × environment at given times, written
    as history rows (reads of the history; a shadow is started through `shadow_start`).
    `spans`: (version, started_at, stopped_at or None). Inserted in SQL: the history is
    append-only and its rows take the time they are written."""
    from django.db import connection

    rows = []
    for revision, (version, started, stopped) in enumerate(spans, start=1):
        rows.append((revision * 2 - 1, "shadow_start", version.pk, started))
        if stopped is not None:
            rows.append((revision * 2, "shadow_stop", version.pk, stopped))
    with connection.cursor() as cursor:
        for revision, action, version_id, when in rows:
            cursor.execute(
                "INSERT INTO strategies_releaseevent (release_id, revision, action,"
                " to_version_id, actor, approved_by, reason, unreviewed, occurred_at)"
                " VALUES (%s, %s, %s, %s, 'ops', '', '', false, %s)",
                [release.pk, revision, action, version_id, when],
            )


@dataclass
class ReleaseSetup:
    agent: object
    envs: dict  # key → Environment
    profile: dict  # version number → Version
    strategy: dict  # version number → Version
    ops: object
    ops2: object
    admin: object


def release_setup() -> ReleaseSetup:
    """Nothing released yet, and:

    - assistant_professional with its profile (v1) and after_sales_consultation v1–v3
      (`strategy_bodies_v1_to_v3`), frozen by ops through the services;
    - sg-test and prod (protected) whose runtimes implement everything v3 needs, and bank-uat
      whose runtime lacks the general_policy_only handler v3 falls back to;
    - ops (operator), ops2 (operator and approver) on assistant_professional, admin on all
      agents — each signs in with `<username>-pass-1`.
    """
    cache_clear_all()  # Redis outlives the test database between runs
    agent = AgentFactory(key=SAMPLE_AGENT)
    envs = {
        "sg-test": EnvironmentFactory(key="sg-test", position=1, manifest=manifest_body()),
        "bank-uat": EnvironmentFactory(
            key="bank-uat", position=2, manifest=manifest_body(handlers=[])
        ),
        "prod": EnvironmentFactory(
            key="prod", position=3, protected=True, manifest=manifest_body()
        ),
    }
    ops = user_with_grants("ops", operator=agent)
    ops2 = user_with_grants("ops2", operator=agent, approver=agent)
    admin = user_with_grants("admin", admin=None)
    profile = frozen_versions(
        DocumentFactory(agent=agent, profile=True), [profile_body()], actor=ops
    )
    strategy = frozen_versions(
        DocumentFactory(agent=agent, key=STRATEGY_KEY), strategy_bodies_v1_to_v3(), actor=ops
    )
    return ReleaseSetup(
        agent=agent,
        envs=envs,
        profile=profile,
        strategy=strategy,
        ops=ops,
        ops2=ops2,
        admin=admin,
    )


def release_setup_serving() -> ReleaseSetup:
    """`release_setup()` with profile v1 and after_sales_consultation v2 live in sg-test
    (`world.sg`): what the runtimes of the stream and fault tests are served."""
    world = release_setup()
    world.sg = world.envs["sg-test"]
    release_publish(version=world.profile[1], environment=world.sg, actor=world.ops)
    release_publish(version=world.strategy[2], environment=world.sg, actor=world.ops)
    return world


def bank_uat_ahead_of_prod(w: ReleaseSetup) -> ReleaseSetup:
    """On top of `release_setup`: bank-uat ahead of prod for two documents, level for one —
    the profile v1 live in both; after_sales_consultation v2 in bank-uat, v1 in prod; a new
    strategy returns_consultation (v1, as `w.returns`) in bank-uat, nothing in prod."""
    uat, prod = w.envs["bank-uat"], w.envs["prod"]
    w.returns = frozen_versions(
        DocumentFactory(agent=w.agent, key="returns_consultation"), [strategy_body()], actor=w.ops
    )[1]
    for version in (w.profile[1], w.strategy[1]):
        publish(version, uat, actor=w.ops)
        publish(version, prod, actor=w.ops, approver=w.ops2)
    publish(w.strategy[2], uat, actor=w.ops)
    publish(w.returns, uat, actor=w.ops)
    return w


def rollout_setup() -> ReleaseSetup:
    """release_setup with runtimes that declare shadow and split (staged rollouts, issue 23),
    and after_sales_consultation v2 live in sg-test and prod (protected; approved by ops2)."""
    from strategies.catalog.services import manifest_record

    setup = release_setup()
    for key, env in setup.envs.items():
        handlers = [] if key == "bank-uat" else ["general_policy_only"]
        manifest_record(
            environment=env, body=manifest_body(handlers=handlers, features=["shadow", "split"])
        )
    for key in ("sg-test", "prod"):
        publish(setup.strategy[2], setup.envs[key], actor=setup.ops, approver=setup.ops2)
    return setup

"""Test data, by subject: import from here (`from tests.factories import UserFactory, grant`).

- users: UserFactory (signs in with `password_for(username)`), RoleFactory, standard_roles,
  GrantFactory, grant, user_with_grants;
- documents: AgentFactory, EnvironmentFactory (with `protected`, and `manifest=` recorded
  through the service), ManifestFactory, DocumentFactory (`profile=True`), DraftVersionFactory,
  FrozenVersionFactory, the body builders manifest_body, strategy_body, profile_body,
  strategy_bodies_v1_to_v3, and the service-backed frozen_version, frozen_versions, profile_edit;
- releases: publish (through the service), ReleaseFactory (rows for reads), release_setup
  (release_setup_serving: with sg-test serving);
- tokens: runtime_token, bearer, runtime_instances (bulk rows, as heartbeats leave them);
- traces: trace_payload, candidate, post_batch, world, TraceFactory (rows for reads).

The whole demo world (`manage.py load_demo`) is only for the browser tests that tell its story.
"""

from tests.factories.documents import (
    OTHER_AGENT,
    SAMPLE_AGENT,
    STRATEGY_KEY,
    AgentFactory,
    DocumentFactory,
    DraftVersionFactory,
    EnvironmentFactory,
    FrozenVersionFactory,
    ManifestFactory,
    frozen_version,
    frozen_versions,
    manifest_body,
    profile_body,
    profile_edit,
    strategy_bodies_v1_to_v3,
    strategy_body,
)
from tests.factories.releases import (
    ReleaseFactory,
    ReleaseSetup,
    bank_uat_ahead_of_prod,
    publish,
    release_setup,
    release_setup_serving,
    shadow_history,
)
from tests.factories.tokens import bearer, legacy_runtime_token, runtime_instances, runtime_token
from tests.factories.traces import (
    INGEST_URL,
    TraceFactory,
    candidate,
    foreign_source_trace,
    post_batch,
    snapshots_allowed,
    task_in_arm,
    trace_payload,
    world,
)
from tests.factories.users import (
    GrantFactory,
    RoleFactory,
    UserFactory,
    grant,
    password_for,
    role_named,
    standard_roles,
    user_with_grants,
)

__all__ = [
    "INGEST_URL",
    "OTHER_AGENT",
    "SAMPLE_AGENT",
    "STRATEGY_KEY",
    "AgentFactory",
    "DocumentFactory",
    "DraftVersionFactory",
    "EnvironmentFactory",
    "FrozenVersionFactory",
    "GrantFactory",
    "ManifestFactory",
    "ReleaseFactory",
    "ReleaseSetup",
    "bank_uat_ahead_of_prod",
    "RoleFactory",
    "TraceFactory",
    "UserFactory",
    "bearer",
    "candidate",
    "foreign_source_trace",
    "frozen_version",
    "frozen_versions",
    "grant",
    "manifest_body",
    "password_for",
    "post_batch",
    "profile_body",
    "snapshots_allowed",
    "task_in_arm",
    "profile_edit",
    "publish",
    "release_setup",
    "release_setup_serving",
    "shadow_history",
    "role_named",
    "runtime_instances",
    "runtime_token",
    "legacy_runtime_token",
    "standard_roles",
    "strategy_bodies_v1_to_v3",
    "strategy_body",
    "trace_payload",
    "user_with_grants",
    "world",
]

"""Onboarding agents and environments through the pages and the services: create, edit,
archive, delete (refused with its reasons once something refers to it), retention that takes
effect at the next purge, and a new agent's pages saying what to do next."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from console.kernel.errors import Conflict, Forbidden, NotFound, ValidationFailed
from console.kernel.models import AuditRecord, Grant
from strategies.catalog import services
from strategies.catalog.models import Agent, Environment
from strategies.documents.models import Document
from strategies.releases.services import release_publish
from tests.factories import (
    AgentFactory,
    EnvironmentFactory,
    frozen_version,
    manifest_body,
    post_batch,
    runtime_token,
    snapshots_allowed,
    strategy_body,
    trace_payload,
    user_with_grants,
    world,
)
from traces import services as trace_services
from traces.models import Snapshot, Trace

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(db):
    return user_with_grants("boss", admin=None)


@pytest.fixture
def admin_client(client, admin):
    client.force_login(admin)
    return client


def audit_actions(prefix: str) -> list[str]:
    return list(
        AuditRecord.objects.filter(action__startswith=prefix)
        .order_by("id")
        .values_list("action", flat=True)
    )


def ago(**delta) -> str:
    return (timezone.now() - timedelta(**delta)).isoformat()


# --- agents through the pages ----------------------------------------------------------------------
def test_agent_create_page__valid__agent_with_profile_and_next_steps(admin_client):
    response = admin_client.post(
        "/catalog/agents/new/",
        {"key": "assistant_returns", "name": "Returns", "description": "Handles returns."},
    )
    assert response.status_code == 302
    assert response["Location"] == "/agents/assistant_returns/"
    agent = Agent.objects.get(key="assistant_returns")
    assert (agent.name, agent.description) == ("Returns", "Handles returns.")
    assert Document.objects.filter(agent=agent, kind="profile").count() == 1
    assert audit_actions("agent.") == ["agent.create"]

    page = admin_client.get("/agents/assistant_returns/").content.decode()
    assert "Next steps for assistant_returns" in page
    assert "Create your first strategy" in page
    assert "/agents/assistant_returns/strategies/" in page


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("Bank Returns!", "Use lowercase letters"),
        ("", "This field is required"),
        ("-leading-dash", "Use lowercase letters"),
    ],
)
def test_agent_create_page__invalid_key__error_at_the_field_nothing_written(
    admin_client, key, words
):
    response = admin_client.post("/catalog/agents/new/", {"key": key, "name": "x"})
    assert response.status_code == 400
    page = response.content.decode()
    field = page[page.index('data-field="key"') :][:1500]
    assert "has-error" in page[page.index('data-field="key"') - 40 :][:80]
    assert words in field
    assert 'value="x"' in page  # what was typed stays
    assert not Agent.objects.exists()
    assert not AuditRecord.objects.filter(action="agent.create").exists()


def test_agent_create_page__duplicate_key__refused_at_the_key(admin_client):
    AgentFactory(key="assistant_returns")
    response = admin_client.post("/catalog/agents/new/", {"key": "assistant_returns"})
    assert response.status_code == 409
    assert "An agent named assistant_returns already exists." in response.content.decode()
    assert Agent.objects.count() == 1


def test_catalog_pages__operator__forbidden_and_no_nav_link(client):
    agent = AgentFactory(key="assistant_returns")
    client.force_login(user_with_grants("ops", operator=agent))
    assert client.get("/catalog/").status_code == 403
    assert client.post("/catalog/agents/new/", {"key": "sneaky"}).status_code == 403
    assert client.post("/catalog/agents/assistant_returns/archive/").status_code == 403
    assert "Agents &amp; environments" not in client.get("/").content.decode()
    assert not Agent.objects.filter(key="sneaky").exists()
    assert Agent.objects.get().archived_at is None


def test_agent_edit__admin_of_one_agent__edits_it_but_not_others_nor_creates(client):
    mine, other = AgentFactory(key="assistant_returns"), AgentFactory(key="assistant_lite")
    client.force_login(user_with_grants("lead", admin=mine))
    overview = client.get("/catalog/")
    assert overview.status_code == 200
    assert "assistant_returns" in overview.content.decode()
    assert "assistant_lite" not in overview.content.decode()
    response = client.post(
        "/catalog/agents/assistant_returns/edit/", {"name": "Returns desk", "description": "d"}
    )
    assert response.status_code == 302
    mine.refresh_from_db()
    assert mine.name == "Returns desk"
    record = AuditRecord.objects.get(action="agent.update")
    assert {c["path"]: (c["before"], c["after"]) for c in record.changes} == {
        "name": ("Assistant Returns", "Returns desk"),
        "description": ("", "d"),
    }
    assert client.get("/catalog/agents/assistant_lite/edit/").status_code == 404
    assert client.post("/catalog/agents/new/", {"key": "new_one"}).status_code == 403
    assert client.post("/catalog/agents/assistant_returns/delete/").status_code == 403
    assert other.name == "Assistant Lite" and Agent.objects.count() == 2


def test_agent_archive__hidden_from_lists_page_reachable_with_banner(admin_client, admin):
    services.agent_create(key="assistant_returns", actor=admin)
    services.agent_create(key="assistant_lite", actor=admin)
    response = admin_client.post(
        "/catalog/agents/assistant_returns/archive/", {"reason": "merged into lite"}
    )
    assert response.status_code == 302
    record = AuditRecord.objects.get(action="agent.archive")
    assert record.after["reason"] == "merged into lite"
    assert {c["path"] for c in record.changes} >= {"archived"}

    agent_list = admin_client.get("/agents/").content.decode()
    assert 'data-agent="assistant_lite"' in agent_list
    assert 'data-agent="assistant_returns"' not in agent_list
    assert 'id="agent-assistant_returns"' not in admin_client.get("/").content.decode()
    api = admin_client.get("/api/v1/agents/").json()
    assert [a["key"] for a in api["results"]] == ["assistant_lite"]
    with_archived = admin_client.get("/api/v1/agents/?archived=true").json()
    assert {a["key"]: a["archived"] for a in with_archived["results"]} == {
        "assistant_lite": False,
        "assistant_returns": True,
    }
    page = admin_client.get("/agents/assistant_returns/")
    assert page.status_code == 200
    assert 'id="archived-banner"' in page.content.decode()
    catalog = admin_client.get("/catalog/").content.decode()
    assert catalog.index('id="archived-agents"') < catalog.index('data-agent="assistant_returns"')

    admin_client.post("/catalog/agents/assistant_returns/unarchive/", {"reason": "split again"})
    assert Agent.objects.get(key="assistant_returns").archived_at is None
    assert audit_actions("agent.") == [
        "agent.create",
        "agent.create",
        "agent.archive",
        "agent.unarchive",
    ]


def test_agent_delete__fresh_agent__gone_with_profile_and_grants(admin_client, admin):
    agent = services.agent_create(key="typo_agent", actor=admin)
    user_with_grants("ann", viewer=agent)
    response = admin_client.post("/catalog/agents/typo_agent/delete/", {"reason": "typo"})
    assert response.status_code == 302
    assert not Agent.objects.filter(key="typo_agent").exists()
    assert not Document.objects.filter(key="profile", agent__key="typo_agent").exists()
    assert not Grant.objects.filter(user__username="ann").exists()
    record = AuditRecord.objects.get(action="agent.delete")
    assert record.agent_key == "typo_agent"
    assert record.before["documents"] == ["profile"] and record.before["grants"] == 1


def test_agent_delete__with_frozen_version_release_and_traces__refused_with_every_reason(
    admin_client, admin, client
):
    env = EnvironmentFactory(key="sg-test", manifest=manifest_body())
    agent = AgentFactory(key="assistant_professional")
    doc = Document.objects.create(agent=agent, kind="strategy", key="after_sales_consultation")
    version = frozen_version(doc, strategy_body(), actor=admin)
    release_publish(version=version, environment=env, actor=admin)
    post_batch(client, runtime_token(env), [trace_payload("req-1")])
    before = AuditRecord.objects.count()

    response = admin_client.post("/catalog/agents/assistant_professional/delete/", {"reason": "x"})

    assert response.status_code == 409
    page = response.content.decode()
    assert "The agent assistant_professional cannot be deleted" in page
    for words in ("it has releases", "its runtime sent traces", "frozen versions"):
        assert words in page
    assert "Archive it instead" in page
    assert Agent.objects.filter(key="assistant_professional").exists()
    assert AuditRecord.objects.count() == before
    # The page already said so: the Delete button is disabled with the reasons beside it.
    overview = admin_client.get("/catalog/").content.decode()
    assert 'id="delete-agent-assistant_professional-why"' in overview


def test_agent_services__out_of_scope_404_forbidden_403(db):
    agent = AgentFactory(key="assistant_returns")
    outsider = user_with_grants("out", admin=AgentFactory(key="assistant_lite"))
    viewer = user_with_grants("viewer", viewer=agent)
    with pytest.raises(NotFound):
        services.agent_update(agent=agent, name="x", actor=outsider)
    with pytest.raises(Forbidden):
        services.agent_archive(agent=agent, actor=viewer)
    with pytest.raises(Forbidden):
        services.agent_create(key="new_one", actor=viewer)
    assert Agent.objects.get(key="assistant_returns").name == "Assistant Returns"


# --- environments ----------------------------------------------------------------------------------
def test_environment_create_page__defaults__last_in_order_and_audited(admin_client):
    EnvironmentFactory(key="sg-test", position=10)
    response = admin_client.post(
        "/catalog/environments/new/",
        {"key": "bank-uat", "trace_retention_days": 30, "snapshot_retention_days": 7},
    )
    assert response.status_code == 302
    env = Environment.objects.get(key="bank-uat")
    assert (env.position, env.protected, env.rollback_needs_approval) == (20, False, False)
    assert AuditRecord.objects.get(action="environment.create").after["key"] == "bank-uat"


def test_environment_form__purge_cadence__help_text_follows_the_setting(admin_client, settings):
    default = html.unescape(admin_client.get("/catalog/environments/new/").content.decode())
    assert "A change applies at the next purge (every 15 minutes)." in default

    settings.TRACES_PURGE_MINUTES = 5
    page = html.unescape(admin_client.get("/catalog/environments/new/").content.decode())

    assert "A change applies at the next purge (every 5 minutes)." in page
    assert "every 15 minutes" not in page


def test_environment_create__no_retention_given__the_one_default_everywhere(admin):
    from strategies.catalog.forms import EnvironmentForm
    from strategies.catalog.models import (
        SNAPSHOT_RETENTION_DAYS_DEFAULT,
        TRACE_RETENTION_DAYS_DEFAULT,
    )
    from strategies.catalog.serializers import EnvironmentCreateRequest

    env = services.environment_create(key="bank-uat", actor=admin)
    defaults = (TRACE_RETENTION_DAYS_DEFAULT, SNAPSHOT_RETENTION_DAYS_DEFAULT)
    assert (env.trace_retention_days, env.snapshot_retention_days) == defaults
    form = EnvironmentForm()
    assert (
        form.fields["trace_retention_days"].initial,
        form.fields["snapshot_retention_days"].initial,
    ) == defaults
    request = EnvironmentCreateRequest(data={"key": "prod"})
    assert request.is_valid(), request.errors
    assert (
        request.validated_data["trace_retention_days"],
        request.validated_data["snapshot_retention_days"],
    ) == defaults


@pytest.mark.parametrize(
    ("trace_days", "snapshot_days", "field", "words"),
    [
        (30, 60, "snapshot_retention_days", "At most the trace retention (30 days)"),
        (0, 0, "trace_retention_days", "greater than or equal to 1"),
        (4000, 7, "trace_retention_days", "less than or equal to 3650"),
        ("ten", 7, "trace_retention_days", "Enter a whole number"),
    ],
)
def test_environment_edit_page__bad_retention__error_at_its_field_nothing_changed(
    admin_client, trace_days, snapshot_days, field, words
):
    EnvironmentFactory(key="prod", position=30, trace_retention_days=30)
    response = admin_client.post(
        "/catalog/environments/prod/edit/",
        {
            "name": "prod",
            "position": 30,
            "trace_retention_days": trace_days,
            "snapshot_retention_days": snapshot_days,
        },
    )
    assert response.status_code == 400
    page = response.content.decode()
    block = page[page.index(f'data-field="{field}"') :][:1200]
    assert words in block
    env = Environment.objects.get(key="prod")
    assert (env.trace_retention_days, env.snapshot_retention_days) == (30, 7)
    assert not AuditRecord.objects.filter(action="environment.update").exists()


def test_environment_update__retention_and_revert_policy__audited_field_by_field(admin):
    env = EnvironmentFactory(key="prod", position=30)
    services.environment_update(
        environment=env,
        actor=admin,
        trace_retention_days=14,
        snapshot_retention_days=3,
        rollback_needs_approval=True,
    )
    record = AuditRecord.objects.get(action="environment.update")
    assert {c["path"]: (c["before"], c["after"]) for c in record.changes} == {
        "trace_retention_days": (30, 14),
        "snapshot_retention_days": (7, 3),
        "rollback_needs_approval": (False, True),
    }
    # The same values again change nothing and record nothing.
    services.environment_update(environment=env, actor=admin, trace_retention_days=14)
    assert AuditRecord.objects.filter(action="environment.update").count() == 1


def test_environment_update__someone_with_manage_catalog_on_one_agent__forbidden(db):
    env = EnvironmentFactory(key="prod")
    lead = user_with_grants("lead", admin=AgentFactory(key="assistant_returns"))
    with pytest.raises(Forbidden):
        services.environment_update(environment=env, actor=lead, trace_retention_days=1)
    assert Environment.objects.get().trace_retention_days == 30


def test_environment_archive__out_of_grids_and_publish_refused(admin, admin_client):
    env = EnvironmentFactory(key="old-uat", manifest=manifest_body())
    agent = AgentFactory(key="assistant_returns")
    doc = Document.objects.create(agent=agent, kind="strategy", key="returns")
    version = frozen_version(doc, strategy_body(), actor=admin)
    env = services.environment_archive(environment=env, actor=admin, reason="decommissioned")

    releases = admin_client.get("/releases/").content.decode()
    assert 'data-environment="old-uat"' not in releases
    with pytest.raises(ValidationFailed) as refused:
        release_publish(version=version, environment=env, actor=admin)
    assert refused.value.details[0]["code"] == "environment_archived"
    assert "old-uat is archived" in refused.value.message

    env = services.environment_unarchive(environment=env, actor=admin)
    assert release_publish(version=version, environment=env, actor=admin).release is not None


def test_environment_delete__bare__deleted_and_audited(admin_client):
    EnvironmentFactory(key="typo-env")
    response = admin_client.post("/catalog/environments/typo-env/delete/", {"reason": "typo"})
    assert response.status_code == 302
    assert not Environment.objects.exists()
    assert AuditRecord.objects.get(action="environment.delete").before["key"] == "typo-env"


def test_environment_delete__manifest_and_token__refused_with_both_reasons(admin, admin_client):
    env = EnvironmentFactory(key="sg-test", manifest=manifest_body())
    runtime_token(env)
    response = admin_client.post("/catalog/environments/sg-test/delete/", {"reason": "x"})
    assert response.status_code == 409
    page = response.content.decode()
    assert "its runtime reported a manifest" in page and "it has runtime tokens" in page
    assert Environment.objects.filter(key="sg-test").exists()
    with pytest.raises(Conflict) as refused:
        services.environment_delete(environment=env, actor=admin)
    assert {d["code"] for d in refused.value.details} == {"has_manifests", "has_runtime_tokens"}


# --- retention takes effect at the next purge -------------------------------------------------------
def test_purge__trace_retention_shortened__old_traces_go_at_the_next_run(admin, client):
    env = world()["environments"]["sg-test"]
    post_batch(
        client,
        runtime_token(env),
        [
            trace_payload("five-days", occurred_at=ago(days=5)),
            trace_payload("today", occurred_at=ago(hours=1)),
        ],
    )
    assert trace_services.traces_purge_expired() == 0  # 30 days: both are kept

    services.environment_update(
        environment=env, actor=admin, trace_retention_days=3, snapshot_retention_days=3
    )
    assert set(Trace.objects.values_list("request_id", flat=True)) == {"five-days", "today"}

    assert trace_services.traces_purge_expired() == 1
    assert list(Trace.objects.values_list("request_id", flat=True)) == ["today"]


def test_purge__snapshot_retention_shortened__older_snapshots_go_at_the_next_run(admin, client):
    env = world()["environments"]["sg-test"]
    snapshots_allowed()
    post_batch(
        client,
        runtime_token(env),
        [
            trace_payload("two-days", occurred_at=ago(days=2), snapshot={"text": "a"}),
            trace_payload("fresh", occurred_at=ago(minutes=5), snapshot={"text": "b"}),
        ],
    )
    # Stored two days ago, as time would have it; its stamped expiry (7 days) is still ahead.
    Snapshot.objects.filter(trace__request_id="two-days").update(
        created_at=timezone.now() - timedelta(days=2)
    )
    assert trace_services.snapshots_purge_expired() == 0

    services.environment_update(environment=env, actor=admin, snapshot_retention_days=1)

    assert trace_services.snapshots_purge_expired() == 1
    assert [s.trace.request_id for s in Snapshot.objects.all()] == ["fresh"]
    assert Trace.objects.count() == 2  # the traces themselves stay (30 days)


# --- a new agent's pages say what to do next -----------------------------------------------------
def _snippet(page: str) -> str:
    start = page.index('data-snippet="connect-runtime">') + len('data-snippet="connect-runtime">')
    return html.unescape(page[start : page.index("</code>", start)])


def test_agent_page__new_agent__next_steps_with_a_working_sdk_snippet(admin_client, admin):
    services.agent_create(key="assistant_returns", actor=admin)
    EnvironmentFactory(key="returns-test")
    page = admin_client.get("/agents/assistant_returns/").content.decode()
    assert "No manifest from returns-test yet" in page
    assert "/releases/tokens/?environment=returns-test" in page
    snippet = _snippet(page)
    assert 'CONSOLE_URL = "http://testserver/"' in snippet
    assert 'ConfigClient(CONSOLE_URL, TOKEN, "assistant_returns")' in snippet
    compile(snippet, "snippet.py", "exec")  # the snippet is Python a runtime can paste


def test_agent_page__viewer__next_steps_without_buttons_they_cannot_use(client, admin):
    agent = services.agent_create(key="assistant_returns", actor=admin)
    EnvironmentFactory(key="returns-test")
    client.force_login(user_with_grants("viewer", viewer=agent))
    page = client.get("/agents/assistant_returns/").content.decode()
    assert "No strategies yet" in page and "Create your first strategy" not in page
    assert "/releases/tokens/" not in page
    assert "Ask an admin for a runtime token" in page


def test_agent_page__strategy_manifest_and_traces__no_next_steps(admin, admin_client, client):
    env = EnvironmentFactory(key="sg-test", manifest=manifest_body())
    services.agent_create(key="assistant_returns", actor=admin)
    Document.objects.create(
        agent=Agent.objects.get(key="assistant_returns"), kind="strategy", key="returns"
    )
    post_batch(client, runtime_token(env), [trace_payload("req-1", agent="assistant_returns")])
    page = admin_client.get("/agents/assistant_returns/").content.decode()
    assert 'id="onboarding"' not in page


def test_trace_list__agent_without_traces__says_how_to_connect_its_runtime(admin_client, admin):
    services.agent_create(key="assistant_returns", actor=admin)
    page = admin_client.get("/traces/?agent=assistant_returns").content.decode()
    assert "No traces from assistant_returns yet" in page
    assert 'ConfigClient(CONSOLE_URL, TOKEN, "assistant_returns")' in _snippet(page)
    # Another filter as well: the ordinary "no match" answer.
    other = admin_client.get("/traces/?agent=assistant_returns&status=degraded").content.decode()
    assert "No trace matches these filters" in other


def test_environment_edit_page__changed_meanwhile__refused_not_overwritten(admin_client, admin):
    EnvironmentFactory(key="prod", position=30)
    form = admin_client.get("/catalog/environments/prod/edit/").content.decode()
    loaded = form.split('name="loaded" value="')[1].split('"')[0]
    # Another admin shortens the retention while this form is open.
    services.environment_update(
        environment=Environment.objects.get(), actor=admin, trace_retention_days=10
    )
    response = admin_client.post(
        "/catalog/environments/prod/edit/",
        {
            "loaded": loaded,
            "name": "Production",
            "position": 30,
            "trace_retention_days": 30,
            "snapshot_retention_days": 7,
        },
    )
    assert response.status_code == 409
    assert "Someone changed the environment prod since you opened it" in response.content.decode()
    env = Environment.objects.get()
    assert (env.name, env.trace_retention_days) == ("prod", 10)


def test_environment_archived__no_new_runtime_token__until_unarchived(admin):
    from strategies.runtime.models import RuntimeToken
    from strategies.runtime.tokens import runtime_token_create

    env = services.environment_archive(
        environment=EnvironmentFactory(key="old-uat"), actor=admin, reason="decommissioned"
    )
    with pytest.raises(ValidationFailed) as refused:
        runtime_token_create(
            name="uat", environment=env, capabilities=["config:read"], all_agents=True, actor=admin
        )
    assert refused.value.details[0]["path"] == "environment"
    assert refused.value.details[0]["code"] == "environment_archived"
    assert not RuntimeToken.objects.exists()
    env = services.environment_unarchive(environment=env, actor=admin)
    token, _ = runtime_token_create(
        name="uat", environment=env, capabilities=["config:read"], all_agents=True, actor=admin
    )
    assert token.environment == env


def test_agent_page__console_with_an_ingest_server__snippet_sends_batches_there(
    admin_client, admin, settings
):
    """Issue 36: a console running its ingest server apart says where runtimes send traces."""
    settings.INGEST_URL = "https://ingest.console.example"
    services.agent_create(key="assistant_returns", actor=admin)
    EnvironmentFactory(key="returns-test")
    snippet = _snippet(admin_client.get("/agents/assistant_returns/").content.decode())
    assert 'INGEST_URL = "https://ingest.console.example"' in snippet
    assert "TraceReporter(CONSOLE_URL, TOKEN, ingest_url=INGEST_URL)" in snippet
    compile(snippet, "snippet.py", "exec")
    # `make run` on every address (HOST=0.0.0.0) sets ":<port>": the host the viewer used.
    settings.INGEST_URL = ":8002"
    snippet = _snippet(admin_client.get("/agents/assistant_returns/").content.decode())
    assert 'INGEST_URL = "http://testserver:8002"' in snippet
    settings.INGEST_URL = ""
    snippet = _snippet(admin_client.get("/agents/assistant_returns/").content.decode())
    assert "INGEST_URL" not in snippet and "TraceReporter(CONSOLE_URL, TOKEN)" in snippet

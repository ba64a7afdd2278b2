"""The database guards hold against an ordinary application session.

The audit log, the access log and the release history are append-only, and frozen versions
never change, whatever a session sets: no `console.allow_truncate` switch exists any more,
and `pgtrigger.ignore` (the session setting behind `pgtrigger.ignore()`) is not read by our
triggers. Each test connects with psycopg as a real role created for it — LOGIN, not a
superuser, not the tables' owner — the way production's application role connects
(docs/access-and-audit.md).
"""

from __future__ import annotations

import pgtrigger
import psycopg
import pytest
from django.db import DatabaseError, connection, transaction

from console.kernel.audit import AccessAction, AuditAction, access_record, audit_record
from console.kernel.models import AccessLogEntry, AuditRecord
from strategies.documents.models import Version
from strategies.releases.models import Release, ReleaseEvent
from tests.engines import pg_connect_kwargs
from tests.factories import EnvironmentFactory, FrozenVersionFactory

# The role must see committed rows: these tests commit, and the database is emptied after
# each one through the superuser-only flush path of tests/conftest.py.
pytestmark = pytest.mark.django_db(transaction=True)

APPEND_ONLY = [AuditRecord, AccessLogEntry, ReleaseEvent]
GUARDED = [*APPEND_ONLY, Version]
STATEMENTS = {
    # CASCADE: a table other rows point at (change records and schedules name a release event)
    # is otherwise refused by PostgreSQL's foreign keys before the guard's trigger is reached.
    "truncate": "TRUNCATE {table} CASCADE",
    "delete": "DELETE FROM {table}",
    "update": "UPDATE {table} SET id = id",
}


@pytest.fixture
def world(make_user):
    """Committed rows in every guarded table: three audit and access rows, a release event,
    a frozen version and a draft."""
    actor = make_user("guard_subject")
    with transaction.atomic():
        for n in range(3):
            audit_record(
                actor=actor, action=AuditAction.AGENT_UPDATE, before={"n": n}, after={"n": n + 1}
            )
            access_record(actor=actor, action=AccessAction.TRACE_VIEW, reason=f"look {n}")
    frozen = FrozenVersionFactory(number=1)
    draft = Version.objects.create(
        document=frozen.document, number=2, body={}, content_hash="draft", author_label="t"
    )
    release = Release.objects.create(
        document=frozen.document, environment=EnvironmentFactory(), version=frozen
    )
    ReleaseEvent.objects.create(
        release=release, revision=1, action="publish", to_version=frozen, actor="t"
    )
    return {"frozen": frozen, "draft": draft}


@pytest.fixture
def app_role(login_role):
    """app_role(privileges, tables) → a psycopg connection (autocommit) as a new LOGIN role
    holding only those privileges on those tables; the role is dropped afterwards."""
    name = login_role()
    opened: list[psycopg.Connection] = []

    def _connect(privileges: str, tables: list[str]) -> psycopg.Connection:
        with connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f'GRANT {privileges} ON {table} TO "{name}"')
        # The test database's server as this process reaches it (TCP or socket), as `name`.
        conn = psycopg.connect(**pg_connect_kwargs(user=name, password=None), autocommit=True)
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()


def _every_switch_on(conn: psycopg.Connection) -> None:
    """Everything a session could set to get past a guard: the old TRUNCATE switch, and
    pgtrigger's ignore list naming every trigger on the guarded tables (names and URIs)."""
    names = [trigger.get_uri(model) for model, trigger in pgtrigger.registered()]
    names += [trigger.get_pgid(model) for model, trigger in pgtrigger.registered()]
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid = ANY(%s::regclass[])",
            [[model._meta.db_table for model in GUARDED]],
        )
        names += [row[0] for row in cursor.fetchall()]
        cursor.execute("SET console.allow_truncate = 'on'")
        cursor.execute(
            "SELECT set_config('pgtrigger.ignore', %s, false)", ["{" + ",".join(names) + "}"]
        )
        cursor.execute("SHOW pgtrigger.ignore")
        assert "pgtrigger_append_only_" in cursor.fetchone()[0]


def _run(conn: psycopg.Connection, statement: str, *params) -> None:
    with conn.cursor() as cursor:
        cursor.execute(statement, params or None)


def _referencing(model) -> list[str]:
    """The tables whose rows point at `model`'s, and at theirs (a TRUNCATE … CASCADE empties
    them too), as PostgreSQL's foreign keys say."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE refs(oid) AS (SELECT %s::regclass UNION SELECT c.conrelid"
            " FROM pg_constraint c JOIN refs r ON c.confrelid = r.oid WHERE c.contype = 'f')"
            " SELECT oid::regclass::text FROM refs WHERE oid <> %s::regclass",
            [model._meta.db_table, model._meta.db_table],
        )
        return sorted(row[0] for row in cursor.fetchall())


def _counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in GUARDED}


def test_app_role__is_an_ordinary_role(world, app_role):
    conn = app_role("SELECT", [AuditRecord._meta.db_table])
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT rolsuper, pg_has_role(current_user, 'pg_write_all_data', 'MEMBER')"
            " FROM pg_roles WHERE rolname = current_user"
        )
        assert cursor.fetchone() == (False, False)
        cursor.execute(
            "SELECT count(*) FROM pg_class WHERE relname = %s AND pg_get_userbyid(relowner) = current_user",
            [AuditRecord._meta.db_table],
        )
        assert cursor.fetchone() == (0,)
        cursor.execute(f"SELECT count(*) FROM {AuditRecord._meta.db_table}")
        assert cursor.fetchone() == (3,)


@pytest.mark.parametrize("verb", STATEMENTS)
@pytest.mark.parametrize("model", APPEND_ONLY, ids=lambda m: m.__name__)
def test_app_role__production_grants__cannot_truncate_delete_or_update_the_logs(
    world, app_role, model, verb
):
    """Production grants the application role SELECT and INSERT on these tables: with every
    switch set, PostgreSQL refuses the rest before any trigger runs."""
    table = model._meta.db_table
    conn = app_role("SELECT, INSERT", [table])
    _every_switch_on(conn)
    before = _counts()
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
        _run(conn, STATEMENTS[verb].format(table=table))
    assert _counts() == before


@pytest.mark.parametrize("verb", STATEMENTS)
@pytest.mark.parametrize("model", APPEND_ONLY, ids=lambda m: m.__name__)
def test_app_role__even_granted_everything__triggers_refuse_with_every_switch_on(
    world, app_role, model, verb
):
    """Defence in depth: a role wrongly granted UPDATE, DELETE and TRUNCATE is still refused,
    by the trigger, with `console.allow_truncate` and `pgtrigger.ignore` set."""
    table = model._meta.db_table
    # Granted on the tables a CASCADE would empty too: only the trigger is left to refuse.
    conn = app_role("SELECT, INSERT, UPDATE, DELETE, TRUNCATE", [table, *_referencing(model)])
    _every_switch_on(conn)
    before = _counts()
    with pytest.raises(
        psycopg.errors.InsufficientPrivilege,
        match=f"{table} is append-only: {verb.upper()} refused",
    ):
        _run(conn, STATEMENTS[verb].format(table=table))
    assert _counts() == before


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE strategies_version SET body = '{}'::jsonb WHERE id = %s",
        "DELETE FROM strategies_version WHERE id = %s",
    ],
)
def test_app_role__frozen_version__refused_with_pgtrigger_ignore_set(world, app_role, statement):
    """The application role edits drafts (UPDATE, DELETE granted): with pgtrigger.ignore set,
    a frozen version is still refused, while the draft next to it is not."""
    conn = app_role("SELECT, UPDATE, DELETE", [Version._meta.db_table])
    _every_switch_on(conn)
    frozen, draft = world["frozen"], world["draft"]
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="is frozen"):
        _run(conn, statement, frozen.pk)
    frozen_body = Version.objects.get(pk=frozen.pk).body
    assert frozen_body == frozen.body

    _run(conn, "UPDATE strategies_version SET note = 'edited' WHERE id = %s", draft.pk)
    assert Version.objects.get(pk=draft.pk).note == "edited"


@pytest.mark.parametrize(
    "statement",
    [
        "SET session_replication_role = replica",
        "ALTER TABLE {table} DISABLE TRIGGER USER",
        "ALTER TABLE {table} DISABLE TRIGGER ALL",
        "DROP TRIGGER {trigger} ON {table}",
    ],
)
@pytest.mark.parametrize("model", GUARDED, ids=lambda m: m.__name__)
def test_app_role__cannot_switch_the_triggers_off(world, app_role, model, statement):
    """What the tests' cleanup and the tamper tests use needs a superuser or the owner."""
    table = model._meta.db_table
    conn = app_role("SELECT, INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER", [table])
    trigger = next(t.get_pgid(m) for m, t in pgtrigger.registered() if m is model)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _run(conn, statement.format(table=table, trigger=trigger))


def test_pgtrigger_ignore__in_python__does_not_bypass_a_guard(world):
    with (
        pgtrigger.ignore(
            "console.AuditRecord:append_only", "strategies.Version:frozen_version_immutable"
        ),
        transaction.atomic(),
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            AuditRecord.objects.update(action="forged")
        with pytest.raises(DatabaseError, match="is frozen"), transaction.atomic():
            Version.objects.filter(pk=world["frozen"].pk).update(note="forged")
    assert not AuditRecord.objects.filter(action="forged").exists()


@pytest.mark.parametrize("model", APPEND_ONLY, ids=lambda m: m.__name__)
def test_truncate__even_by_a_superuser_session__refused_without_disabling_triggers(world, model):
    """The trigger has no exception at all: the tests' own (superuser) connection is refused
    too, unless it turns triggers off first, which only a superuser or the owner can."""
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET LOCAL console.allow_truncate = 'on'")
        cursor.execute(STATEMENTS["truncate"].format(table=model._meta.db_table))
    assert model.objects.exists()


def test_guards__installed_as_declared_and_read_no_session_setting(world):
    guards = [(m, t) for m, t in pgtrigger.registered() if m in GUARDED]
    assert {f"{m.__name__}:{t.name}" for m, t in guards} == {
        "AuditRecord:append_only",
        "AuditRecord:no_truncate",
        "AccessLogEntry:append_only",
        "AccessLogEntry:no_truncate",
        "ReleaseEvent:append_only",
        "ReleaseEvent:no_truncate",
        "Version:frozen_version_immutable",
    }
    for model, trigger in guards:
        # installed by the migrations exactly as the model declares it (same hash), enabled
        assert trigger.get_installation_status(model) == ("INSTALLED", True), trigger.get_uri(model)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.tgname, p.prosrc FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
            " WHERE NOT t.tgisinternal AND t.tgrelid = ANY(%s::regclass[])",
            [[model._meta.db_table for model in GUARDED]],
        )
        functions = dict(cursor.fetchall())
    # only the declared triggers remain (the raw-SQL ones of the first migrations are gone)
    assert set(functions) == {t.get_pgid(m) for m, t in guards}
    for name, source in functions.items():
        assert "current_setting" not in source.lower(), name
        assert "_pgtrigger_should_ignore" not in source, name

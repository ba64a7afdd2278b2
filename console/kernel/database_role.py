"""Whether the database role the console runs as could switch the guards off.

The append-only triggers (`console.kernel.guards`) hold against every session but two: a
superuser (`SET session_replication_role = replica`) and whoever owns a guarded table, its
trigger functions or the schema (`ALTER TABLE ... DISABLE TRIGGER`, `DROP TRIGGER`, `CREATE
OR REPLACE FUNCTION`). Production's web, worker and beat therefore run as an ordinary
application role (docs/access-and-audit.md, "Database privileges"). `privileged_role_findings`
says what is wrong with the current one; `manage.py check --deploy` reports it
(`console.E101`) and a production process refuses to start with it
(`refuse_to_start_as_privileged_role`).
"""

from __future__ import annotations

import logging

import pgtrigger
from django.conf import settings
from django.core import checks
from django.db import DatabaseError, connection

from console.kernel.guards import Guard

log = logging.getLogger(__name__)

CHECK_ID = "console.E101"
HINT = (
    "Run web, worker and beat as an ordinary LOGIN role that owns nothing and holds SELECT and "
    "INSERT only on the logs; keep the owner role for `manage.py migrate` (docs/access-and-audit.md, "
    '"Database privileges").'
)


def guarded_tables() -> list[str]:
    """The tables an append-only or frozen-row guard protects."""
    tables = {
        model._meta.db_table
        for model, trigger in pgtrigger.registered()
        if isinstance(trigger, Guard)
    }
    return sorted(tables)


# Each query answers the names of what the current role (or a role it belongs to) owns.
_OWNED = {
    "table": """
        SELECT c.relname FROM pg_class c
        WHERE c.oid = ANY(%(tables)s::regclass[]) AND pg_has_role(c.relowner, 'MEMBER')
        ORDER BY 1""",
    "trigger function": """
        SELECT DISTINCT p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
        WHERE NOT t.tgisinternal AND t.tgrelid = ANY(%(tables)s::regclass[])
          AND pg_has_role(p.proowner, 'MEMBER')
        ORDER BY 1""",
    "schema": """
        SELECT DISTINCT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = ANY(%(tables)s::regclass[]) AND pg_has_role(n.nspowner, 'MEMBER')
        ORDER BY 1""",
}


def privileged_role_findings(cursor) -> list[str]:
    """What lets the current database role switch the guards off, one sentence each; empty
    for a role fit to run the console."""
    cursor.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
    role, superuser = cursor.fetchone()
    findings = []
    if superuser:
        findings.append(
            f"The database role {role!r} is a superuser: it can switch the audit log's "
            "append-only triggers off (session_replication_role)."
        )
    tables = guarded_tables()
    for what, query in _OWNED.items():
        cursor.execute(query, {"tables": tables})
        owned = [row[0] for row in cursor.fetchall()]
        if owned and not superuser:  # a superuser owns everything: said once above
            findings.append(
                f"The database role {role!r} owns (or belongs to the owner of) the {what} "
                f"{', '.join(owned)}: it can disable or drop the guards."
            )
    return findings


def _findings_or_none() -> list[str] | None:
    try:
        with connection.cursor() as cursor:
            return privileged_role_findings(cursor)
    except DatabaseError as exc:
        log.warning("database role not checked: the database did not answer (%s)", exc)
        return None


@checks.register(checks.Tags.database, deploy=True)
def check_database_role(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """`manage.py check --deploy`: an error for a role that could switch the guards off."""
    findings = _findings_or_none()
    if findings is None:
        return [
            checks.Warning(
                "The database role could not be checked: the database did not answer.",
                id="console.W101",
            )
        ]
    return [checks.Error(text, hint=HINT, id=CHECK_ID) for text in findings]


def refuse_to_start_as_privileged_role() -> None:
    """At a production process's start (web, worker, beat): exit, in one line, rather than
    run as a role that could switch the guards off. A database that does not answer yet is
    the health check's business, not a reason to refuse."""
    if not settings.PRODUCTION:
        return
    findings = _findings_or_none()
    if findings:
        raise SystemExit("configuration error: " + " ".join([*findings, HINT]))

"""Database guards that no session can switch off: triggers declared on the models with
django-pgtrigger, compiled without pgtrigger's session-level "ignore" switch (a setting any
database session could set, which would let it rewrite the audit log or a frozen version)."""

from __future__ import annotations

import pgtrigger
from django.db import models
from pgtrigger import compiler


class GuardTriggerSql(compiler.UpsertTriggerSql):
    """pgtrigger's install SQL without its `pgtrigger.ignore` check.

    pgtrigger's own template starts every trigger function with "return early if this
    trigger's name is in the session setting `pgtrigger.ignore`" — a custom setting that
    ANY session may `SET`, so any application connection could switch a protection off
    (`SET pgtrigger.ignore = '{pgtrigger_append_only_...}'`). This template is the same minus
    that check (and minus the helper function it calls): nothing a session sets turns a
    guard off. Only the table owner or a superuser can (`ALTER TABLE ... DISABLE TRIGGER`),
    and production's application role is neither (docs/access-and-audit.md).

    Do not edit the template: migrations hold their own frozen copy of it, and a changed
    template changes every guard's hash.
    """

    def get_template(self) -> str:
        return """
            CREATE OR REPLACE FUNCTION {pgid}()
            RETURNS TRIGGER AS $$
                {declare}
                BEGIN
                    {func}
                END;
            $$ LANGUAGE plpgsql;

            DROP TRIGGER IF EXISTS {pgid} ON {table};
            CREATE {constraint} TRIGGER {pgid}
                {when} {operation} ON {table}
                {timing}
                {referencing}
                FOR EACH {level} {condition}
                EXECUTE PROCEDURE {execute};

            COMMENT ON TRIGGER {pgid} ON {table} IS '{hash}';
        """


class Guard(pgtrigger.Trigger):
    """A BEFORE trigger whose `func` raises the refusal; `pgtrigger.ignore()` (or the session
    setting behind it) does not switch it off — see `GuardTriggerSql`."""

    when = pgtrigger.Before

    def compile(self, model: models.Model) -> compiler.Trigger:
        compiled = super().compile(model)
        return compiler.Trigger(name=compiled.name, sql=GuardTriggerSql(**compiled.sql.kwargs))


# The refusal every append-only table raises (audit log, access log, release history).
APPEND_ONLY_REFUSAL = (
    "RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP"
    " USING ERRCODE = 'insufficient_privilege';"
)


def append_only_triggers() -> list[Guard]:
    """The triggers of an append-only table: no UPDATE or DELETE of a row, no TRUNCATE."""
    return [
        Guard(
            name="append_only",
            operation=pgtrigger.Update | pgtrigger.Delete,
            func=APPEND_ONLY_REFUSAL,
        ),
        Guard(
            name="no_truncate",
            operation=pgtrigger.Truncate,
            level=pgtrigger.Statement,
            func=APPEND_ONLY_REFUSAL,
        ),
    ]

"""The audit and access logs' append-only triggers, now declared on the models with
django-pgtrigger (`ChainedRecord.Meta.triggers`): drop the raw-SQL triggers and the
`console_append_only()` function of 0002 — which let TRUNCATE through for any session that
ran `SET console.allow_truncate = on` — and install the declared ones, which have no switch.
Tests empty these tables through a path only a superuser has (tests/conftest.py)."""

import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations


class GuardTriggerSql(pgtrigger.compiler.UpsertTriggerSql):
    """A frozen copy of the install template of `Guard` triggers (no live-code import in a
    migration): pgtrigger's template minus its `pgtrigger.ignore` check, which any session
    could switch on to skip a trigger. Nothing a session sets turns these triggers off."""

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


TABLES = ["console_auditrecord", "console_accesslogentry"]

# What 0002 created, recreated as it was by the reverse (its TRUNCATE switch included:
# reverting this migration reverts the fix).
OLD_TRIGGERS = """
CREATE OR REPLACE FUNCTION console_append_only() RETURNS trigger AS $$
BEGIN
    -- Only a database configured for tests (ALTER DATABASE ... SET console.allow_truncate)
    -- may be emptied between test cases; UPDATE and DELETE are refused everywhere.
    IF TG_OP = 'TRUNCATE' AND current_setting('console.allow_truncate', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
""" + "".join(
    f"""
CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION console_append_only();
CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION console_append_only();
"""
    for table in TABLES
)

DROP_OLD_TRIGGERS = (
    "".join(
        f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};"
        f" DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};"
        for table in TABLES
    )
    # strategies 0006 dropped the release-history triggers that used it too.
    + " DROP FUNCTION IF EXISTS console_append_only();"
)


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_append_only_logs_and_standard_roles"),
        ("strategies", "0006_guards_declared_with_pgtrigger"),
    ]

    operations = [
        migrations.RunSQL(DROP_OLD_TRIGGERS, OLD_TRIGGERS),
        pgtrigger.migrations.AddTrigger(
            model_name="accesslogentry",
            trigger=pgtrigger.compiler.Trigger(
                name="append_only",
                sql=GuardTriggerSql(
                    func="RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';",
                    hash="41b2623fffcc6b40eed4d2a07e273f60b18ff848",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_append_only_26597",
                    table="console_accesslogentry",
                    when="BEFORE",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="accesslogentry",
            trigger=pgtrigger.compiler.Trigger(
                name="no_truncate",
                sql=GuardTriggerSql(
                    func="RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';",
                    hash="ecd0b5b4c1a5991b2503f05a4d73a7c2f4418488",
                    level="STATEMENT",
                    operation="TRUNCATE",
                    pgid="pgtrigger_no_truncate_90afb",
                    table="console_accesslogentry",
                    when="BEFORE",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="auditrecord",
            trigger=pgtrigger.compiler.Trigger(
                name="append_only",
                sql=GuardTriggerSql(
                    func="RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';",
                    hash="5afe97bd1d660d5c4d8461dcb576f7ea079a3ba7",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_append_only_f21e0",
                    table="console_auditrecord",
                    when="BEFORE",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="auditrecord",
            trigger=pgtrigger.compiler.Trigger(
                name="no_truncate",
                sql=GuardTriggerSql(
                    func="RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';",
                    hash="9eca809eb4d42e8f027b3cf1a64cfaab2e7f1213",
                    level="STATEMENT",
                    operation="TRUNCATE",
                    pgid="pgtrigger_no_truncate_b57ff",
                    table="console_auditrecord",
                    when="BEFORE",
                ),
            ),
        ),
    ]

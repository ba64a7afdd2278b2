"""The frozen-version and release-history triggers, now declared on the models with
django-pgtrigger (`Version.Meta.triggers`, `ReleaseEvent.Meta.triggers`): drop the raw-SQL
triggers of 0002 and 0004, install the declared ones. Console's 0003 then drops the shared
`console_append_only()` function, which no longer has a trigger here."""

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


# What 0002 and 0004 created, recreated as it was by the reverse.
OLD_TRIGGERS = """
CREATE OR REPLACE FUNCTION strategies_version_immutable() RETURNS trigger AS $$
BEGIN
    IF OLD.state = 'frozen' THEN
        RAISE EXCEPTION 'version % of document % is frozen and cannot be changed', OLD.number, OLD.document_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER strategies_version_immutable
    BEFORE UPDATE OR DELETE ON strategies_version
    FOR EACH ROW EXECUTE FUNCTION strategies_version_immutable();

CREATE TRIGGER strategies_releaseevent_append_only BEFORE UPDATE OR DELETE ON strategies_releaseevent
    FOR EACH ROW EXECUTE FUNCTION console_append_only();
CREATE TRIGGER strategies_releaseevent_no_truncate BEFORE TRUNCATE ON strategies_releaseevent
    FOR EACH STATEMENT EXECUTE FUNCTION console_append_only();
"""

DROP_OLD_TRIGGERS = """
DROP TRIGGER IF EXISTS strategies_version_immutable ON strategies_version;
DROP FUNCTION IF EXISTS strategies_version_immutable();
DROP TRIGGER IF EXISTS strategies_releaseevent_append_only ON strategies_releaseevent;
DROP TRIGGER IF EXISTS strategies_releaseevent_no_truncate ON strategies_releaseevent;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("strategies", "0005_releases_webhooks_and_config_payloads"),
    ]

    operations = [
        migrations.RunSQL(DROP_OLD_TRIGGERS, OLD_TRIGGERS),
        pgtrigger.migrations.AddTrigger(
            model_name="releaseevent",
            trigger=pgtrigger.compiler.Trigger(
                name="append_only",
                sql=GuardTriggerSql(
                    func="RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';",
                    hash="5e92f9c61da74d109c4202a343071709c954cbe3",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_append_only_ab359",
                    table="strategies_releaseevent",
                    when="BEFORE",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="releaseevent",
            trigger=pgtrigger.compiler.Trigger(
                name="no_truncate",
                sql=GuardTriggerSql(
                    func="RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';",
                    hash="f02ef2df850ce338d1f8a1bc895cb5749d4d4e59",
                    level="STATEMENT",
                    operation="TRUNCATE",
                    pgid="pgtrigger_no_truncate_1f94b",
                    table="strategies_releaseevent",
                    when="BEFORE",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="version",
            trigger=pgtrigger.compiler.Trigger(
                name="frozen_version_immutable",
                sql=GuardTriggerSql(
                    condition="WHEN (OLD.\"state\" = 'frozen')",
                    func="RAISE EXCEPTION 'version % of document % is frozen and cannot be changed', OLD.number, OLD.document_id USING ERRCODE = 'integrity_constraint_violation';",
                    hash="9165097f2eb8ec30c2ef6d3af1d60c0b618e2637",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_frozen_version_immutable_74b46",
                    table="strategies_version",
                    when="BEFORE",
                ),
            ),
        ),
    ]

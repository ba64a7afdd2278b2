"""Checkpoints of the audit and access logs' chain heads (`ChainCheckpoint`), append-only with
the same guards as the logs: `audit_verify` reports a chain that no longer reaches them."""

import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models


class GuardTriggerSql(pgtrigger.compiler.UpsertTriggerSql):
    """A frozen copy of the install template of `Guard` triggers (as in 0003: no live-code
    import in a migration): pgtrigger's template minus its `pgtrigger.ignore` check."""

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


REFUSAL = (
    "RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP"
    " USING ERRCODE = 'insufficient_privilege';"
)


class Migration(migrations.Migration):
    dependencies = [("console", "0003_guards_declared_with_pgtrigger")]

    operations = [
        migrations.CreateModel(
            name="ChainCheckpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "log",
                    models.CharField(
                        choices=[("audit", "audit log"), ("access", "access log")], max_length=20
                    ),
                ),
                (
                    "last_id",
                    models.BigIntegerField(
                        help_text="The chain's newest row (0: the log was empty)."
                    ),
                ),
                ("last_hash", models.CharField(max_length=64)),
                ("row_count", models.BigIntegerField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["-id"],
                "indexes": [models.Index(fields=["log", "-id"], name="console_cha_log_5b3306_idx")],
            },
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="chaincheckpoint",
            trigger=pgtrigger.compiler.Trigger(
                name="append_only",
                sql=GuardTriggerSql(
                    func=REFUSAL,
                    hash="b9c5bbc6d366fd0b9431a8ed85f73147921fe070",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_append_only_35f55",
                    table="console_chaincheckpoint",
                    when="BEFORE",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="chaincheckpoint",
            trigger=pgtrigger.compiler.Trigger(
                name="no_truncate",
                sql=GuardTriggerSql(
                    func=REFUSAL,
                    hash="37fac9760f009d9bf2218cc4b140a292c3835f6a",
                    level="STATEMENT",
                    operation="TRUNCATE",
                    pgid="pgtrigger_no_truncate_db632",
                    table="console_chaincheckpoint",
                    when="BEFORE",
                ),
            ),
        ),
    ]

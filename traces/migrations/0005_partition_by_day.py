"""Partition traces and candidates by day; per-environment uniqueness in traces_request_key.

docs/traces-storage.md. Converts the tables in one transaction (rename, create partitioned,
copy, drop): fine for new and small installations; a large one follows the documented
online steps and then `migrate --fake traces 0005`.
"""

from datetime import UTC, date, datetime, timedelta

from django.contrib.postgres.indexes import BrinIndex
from django.db import migrations, models
from django.utils import timezone

TRACE_INDEXES = """
CREATE INDEX trace_request_id_env ON traces_trace (request_id, environment_id);
CREATE INDEX trace_agent_env_time ON traces_trace (agent_id, environment_id, occurred_at DESC);
CREATE INDEX trace_agent_strategy_time
    ON traces_trace (agent_id, strategy, strategy_version, occurred_at DESC);
CREATE INDEX trace_status_time ON traces_trace (status, occurred_at DESC);
CREATE INDEX trace_occurred_brin ON traces_trace USING brin (occurred_at);
CREATE INDEX trace_received_brin ON traces_trace USING brin (received_at);
CREATE INDEX candidate_trace ON traces_candidate (trace_id);
CREATE INDEX candidate_source_excluded ON traces_candidate (source, decision, trace_id DESC)
    WHERE NOT (decision = 'selected');
"""


# A frozen copy of what this migration needs from traces/partitions.py (as it was when the
# migration was written): a later change to the live module must not change what it does.
PARENTS = ("traces_trace", "traces_candidate")


def partition_name(parent: str, day: date) -> str:
    return f"{parent}_p{day:%Y%m%d}"


def ensure_range(cursor, *, today: date, days_back: int, days_ahead: int) -> None:
    """Create the day partitions of both (new, empty) tables from today - days_back to
    today + days_ahead."""
    for parent in PARENTS:
        for offset in range(-days_back, days_ahead + 1):
            day = today + timedelta(days=offset)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            low, high = start.isoformat(), (start + timedelta(days=1)).isoformat()
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {partition_name(parent, day)} PARTITION OF "
                f"{parent} FOR VALUES FROM ('{low}') TO ('{high}')"
            )


def convert(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        environment = apps.get_model("strategies", "Environment")
        longest = environment.objects.aggregate(m=models.Max("trace_retention_days"))["m"]
        retention = max(longest or 30, 30)
        cursor.execute(
            """
            ALTER TABLE traces_trace RENAME TO traces_trace_old;
            ALTER TABLE traces_candidate RENAME TO traces_candidate_old;
            ALTER TABLE traces_trace_old RENAME CONSTRAINT traces_trace_pkey TO traces_trace_old_pk;
            ALTER TABLE traces_candidate_old
                RENAME CONSTRAINT traces_candidate_pkey TO traces_candidate_old_pk;
            CREATE TABLE traces_trace (LIKE traces_trace_old INCLUDING DEFAULTS)
                PARTITION BY RANGE (occurred_at);
            ALTER TABLE traces_trace ADD CONSTRAINT traces_trace_pkey
                PRIMARY KEY (id, occurred_at);
            CREATE TABLE traces_candidate (
                LIKE traces_candidate_old INCLUDING DEFAULTS,
                occurred_at timestamptz NOT NULL
            ) PARTITION BY RANGE (occurred_at);
            ALTER TABLE traces_candidate ADD CONSTRAINT traces_candidate_pkey
                PRIMARY KEY (id, occurred_at);
            """
        )
        cursor.execute("SELECT min(occurred_at)::date FROM traces_trace_old")
        oldest = cursor.fetchone()[0]
        today = timezone.now().date()
        back = retention + 14
        if oldest is not None:
            back = max(back, (today - oldest).days)
        ensure_range(cursor, today=today, days_back=back, days_ahead=7)
        cursor.execute(
            """
            INSERT INTO traces_trace SELECT * FROM traces_trace_old;
            INSERT INTO traces_candidate
                SELECT c.*, t.occurred_at FROM traces_candidate_old c
                JOIN traces_trace_old t ON t.id = c.trace_id;
            INSERT INTO traces_request_key (environment_id, request_id, trace_id, occurred_at)
                SELECT environment_id, request_id, id, occurred_at FROM traces_trace_old;
            CREATE SEQUENCE traces_candidate_id_seq_p AS bigint
                OWNED BY traces_candidate.id;
            SELECT setval('traces_candidate_id_seq_p',
                          coalesce((SELECT max(id) FROM traces_candidate_old), 0) + 1, false);
            CREATE SEQUENCE traces_trace_id_seq_p AS bigint OWNED BY traces_trace.id;
            SELECT setval('traces_trace_id_seq_p',
                          coalesce((SELECT max(id) FROM traces_trace_old), 0) + 1, false);
            DROP TABLE traces_candidate_old;
            DROP TABLE traces_trace_old;
            ALTER SEQUENCE traces_trace_id_seq_p RENAME TO traces_trace_id_seq;
            ALTER SEQUENCE traces_candidate_id_seq_p RENAME TO traces_candidate_id_seq;
            ALTER TABLE traces_trace ALTER id SET DEFAULT nextval('traces_trace_id_seq');
            ALTER TABLE traces_candidate
                ALTER id SET DEFAULT nextval('traces_candidate_id_seq');
            """
        )
        cursor.execute(TRACE_INDEXES)


class Migration(migrations.Migration):
    dependencies = [("traces", "0004_rollup_by_source"), ("strategies", "0007_approval_withdrawn")]

    operations = [
        migrations.AlterField(
            model_name="snapshot",
            name="trace",
            field=models.OneToOneField(
                db_constraint=False,
                on_delete=models.deletion.CASCADE,
                related_name="snapshot",
                to="traces.trace",
            ),
        ),
        migrations.CreateModel(
            name="RequestKey",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "environment_id",
                        "request_id",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("environment_id", models.BigIntegerField()),
                ("request_id", models.CharField(db_collation="C", max_length=200)),
                ("trace_id", models.BigIntegerField()),
                ("occurred_at", models.DateTimeField()),
            ],
            options={
                "db_table": "traces_request_key",
                "indexes": [BrinIndex(fields=["occurred_at"], name="request_key_occurred_brin")],
            },
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="trace", name="trace_request_id_per_environment"
                ),
                migrations.AddIndex(
                    model_name="trace",
                    index=models.Index(
                        fields=["request_id", "environment"], name="trace_request_id_env"
                    ),
                ),
                migrations.AddField(
                    model_name="candidate",
                    name="occurred_at",
                    field=models.DateTimeField(default=timezone.now),
                    preserve_default=False,
                ),
            ],
            database_operations=[migrations.RunPython(convert, migrations.RunPython.noop)],
        ),
    ]

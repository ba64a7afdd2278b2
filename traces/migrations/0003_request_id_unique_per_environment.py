"""A request_id is unique per environment, no longer across all of them (issue 11, item 7).

The new unique index is built CONCURRENTLY (ingest goes on while it builds) and then becomes
the constraint; only then is the old global one dropped, so uniqueness holds throughout.
"""

from django.db import migrations, models

CONSTRAINT = "trace_request_id_per_environment"


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [("traces", "0002_trace_config_source_and_candidate_replay")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {CONSTRAINT} "
                    "ON traces_trace (request_id, environment_id)",
                    reverse_sql=f"DROP INDEX CONCURRENTLY IF EXISTS {CONSTRAINT}",
                ),
                migrations.RunSQL(
                    f"ALTER TABLE traces_trace ADD CONSTRAINT {CONSTRAINT} "
                    f"UNIQUE USING INDEX {CONSTRAINT}",
                    reverse_sql=f"ALTER TABLE traces_trace DROP CONSTRAINT {CONSTRAINT}",
                ),
            ],
            state_operations=[
                migrations.AddConstraint(
                    model_name="trace",
                    constraint=models.UniqueConstraint(
                        fields=("request_id", "environment"), name=CONSTRAINT
                    ),
                ),
            ],
        ),
        migrations.AlterField(
            model_name="trace",
            name="request_id",
            field=models.CharField(db_collation="C", max_length=200),
        ),
    ]

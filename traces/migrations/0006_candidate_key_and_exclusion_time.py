"""Candidates lose their id (keyed by trace and position); the exclusion index gains reason
and time, so "source S excluded as D for reason R, newest first" stops after one page, and
holds one entry per trace and kind (`first_of_kind`).

Existing rows get first_of_kind = true: every one of them is indexed, as before, and every
query stays right (it asks for "a first of kind that matches", which they all are).

docs/traces-storage.md. Dropping the column is a catalog change; the index is built on every
partition in one statement here — a large installation builds it per partition first
(CREATE INDEX CONCURRENTLY, then ATTACH), as the document says, and fakes this migration.
"""

from django.db import migrations, models

FORWARD = """
ALTER TABLE traces_candidate DROP COLUMN id;
DROP SEQUENCE IF EXISTS traces_candidate_id_seq;
DROP INDEX IF EXISTS candidate_source_excluded;
ALTER TABLE traces_candidate ADD COLUMN first_of_kind boolean NOT NULL DEFAULT true;
ALTER TABLE traces_candidate ALTER COLUMN first_of_kind DROP DEFAULT;
CREATE INDEX candidate_exclusion_time
    ON traces_candidate (source, decision, reason, occurred_at DESC, trace_id DESC)
    WHERE first_of_kind AND NOT (decision = 'selected');
"""


class Migration(migrations.Migration):
    dependencies = [("traces", "0005_partition_by_day")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="candidate", name="candidate_source_excluded"),
                migrations.RemoveField(model_name="candidate", name="id"),
                migrations.AddField(
                    model_name="candidate",
                    name="pk",
                    field=models.CompositePrimaryKey(
                        "trace_id",
                        "position",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                migrations.AddField(
                    model_name="candidate",
                    name="first_of_kind",
                    field=models.BooleanField(
                        default=True,
                        help_text="The trace's first candidate with this source, decision, reason.",
                    ),
                ),
                migrations.AddIndex(
                    model_name="candidate",
                    index=models.Index(
                        condition=models.Q(
                            ("first_of_kind", True),
                            models.Q(("decision", "selected"), _negated=True),
                        ),
                        fields=["source", "decision", "reason", "-occurred_at", "-trace"],
                        name="candidate_exclusion_time",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, migrations.RunSQL.noop)],
        ),
    ]

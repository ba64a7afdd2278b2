"""Every request leaves a trace (issue 21, docs/runtime-contract.md §3): the truncation flag
and the counts of all candidates by decision, the engine's findings of a request whose input
the runtime refused (status input_refused), and the contextSections rendered into the request.

Cheap on a large table, as 0007: nullable columns and one constant default (a catalog-only
"fast default"), no CHECK; the status choice is Django's only (no SQL).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0007_replay_fields"),
    ]

    operations = [
        migrations.AddField(
            model_name="trace",
            name="candidate_counts",
            field=models.JSONField(
                blank=True,
                help_text="Decision → candidates, all of them (when truncated).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="candidates_truncated",
            field=models.BooleanField(
                db_default=False, default=False, help_text="Only part of the candidates are stored."
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="input_errors",
            field=models.JSONField(
                blank=True,
                help_text="[{path, code, message, source, item}] (input_refused).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="input_errors_total",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="trace",
            name="sections",
            field=models.JSONField(
                blank=True,
                help_text="{user_context: [keys], query_context: [keys]} rendered.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="trace",
            name="status",
            field=models.CharField(
                choices=[
                    ("ready", "Ready"),
                    ("missing_required_data", "Missing required data"),
                    ("budget_exceeded", "Budget exceeded"),
                    ("source_conflict", "Source conflict"),
                    ("degraded", "Degraded"),
                    ("input_refused", "Runtime refused its input"),
                ],
                max_length=30,
            ),
        ),
    ]

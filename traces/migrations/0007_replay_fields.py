"""The replay fields (issue 20, docs/runtime-contract.md §3): per candidate the provider's own
bundle and a reason code; per trace the `selection` block (engine, fixed input tokens,
relevance threshold, the context_window and max_input_tokens given to select()).

Cheap on a large table: every column is nullable or has a constant default ('' NOT NULL is a
"fast default" since PostgreSQL 11: catalog only, no rewrite, no scan), and no CHECK
constraint (one would scan every row to validate). ALTER TABLE on the partitioned parents
adds each column to every day partition, and partitions created later (PARTITION OF) take
the parents' columns. Traces stored before keep blank/null: "no replay fields".
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0006_candidate_key_and_exclusion_time"),
    ]

    operations = [
        migrations.AddField(
            model_name="candidate",
            name="provider_bundle",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="The provider's bundle.",
                max_length=100,
            ),
        ),
        migrations.AddField(
            model_name="candidate",
            name="reason_code",
            field=models.CharField(
                blank=True,
                db_collation="C",
                db_default="",
                default="",
                help_text="Why, from the closed list context_runtime.wire.REASON_CODES.",
                max_length=30,
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="engine",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="context_runtime <version> rules <hash>; blank: no replay fields sent.",
                max_length=100,
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="fixed_input_tokens",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="trace",
            name="relevance_threshold",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="trace",
            name="selection_context_window",
            field=models.IntegerField(
                blank=True, help_text="The context_window given to select().", null=True
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="selection_max_input_tokens",
            field=models.IntegerField(
                blank=True, help_text="The call's own cap given to select().", null=True
            ),
        ),
    ]

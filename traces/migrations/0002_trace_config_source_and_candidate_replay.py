"""Where a runtime's configuration came from (the SDK's resolution reason and age), and what
the engine needs to replay a candidate's decision without the providers."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("traces", "0001_traces_and_candidates")]

    operations = [
        migrations.AddField(
            model_name="trace",
            name="config_resolution",
            field=models.CharField(
                blank=True, help_text="fresh, cached, stale, bootstrap or error.", max_length=20
            ),
        ),
        migrations.AddField(
            model_name="trace",
            name="config_age_seconds",
            field=models.FloatField(
                blank=True, help_text="Age of the runtime's configuration copy.", null=True
            ),
        ),
        migrations.AddField(
            model_name="candidate",
            name="outcome",
            field=models.CharField(blank=True, help_text="The provider's outcome.", max_length=20),
        ),
        migrations.AddField(
            model_name="candidate",
            name="relevance",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="candidate",
            name="depends_on",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="candidate",
            name="conflicts_with",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="candidate",
            name="note",
            field=models.CharField(blank=True, help_text="The provider's words.", max_length=200),
        ),
    ]

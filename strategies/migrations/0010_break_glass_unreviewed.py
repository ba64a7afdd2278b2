"""Break-glass (issue 19, item 3): an environment remembers when one person switched its
approvals off and why; releases and their history say what went live unreviewed meanwhile
(never a rollback target). Existing rows: no break-glass, nothing unreviewed."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("strategies", "0009_runtime_token_all_agents_flag"),
    ]

    operations = [
        migrations.AddField(
            model_name="environment",
            name="break_glass_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="environment",
            name="break_glass_by",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="environment",
            name="break_glass_reason",
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="environment",
            name="break_glass_relaxed",
            field=models.JSONField(
                blank=True, default=list, help_text="The flags the break-glass switched off."
            ),
        ),
        migrations.AddField(
            model_name="release",
            name="unreviewed",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="releaseevent",
            name="unreviewed",
            field=models.BooleanField(default=False),
        ),
    ]

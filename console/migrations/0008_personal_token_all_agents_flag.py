"""Personal tokens: "every agent" becomes the explicit flag `all_agents`, no longer an empty
agent set (which deleting an agent could produce, widening its tokens to every agent the
user sees). The tokens whose agent set is empty today get all_agents=True, so nothing
changes for them."""

from django.db import migrations, models


def every_agent_where_none_named(apps, schema_editor):
    PersonalToken = apps.get_model("console", "PersonalToken")
    PersonalToken.objects.filter(agents__isnull=True).update(all_agents=True)


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0007_log_rows_keep_their_agent_id"),
        ("strategies", "0009_runtime_token_all_agents_flag"),
    ]

    operations = [
        migrations.AddField(
            model_name="personaltoken",
            name="all_agents",
            field=models.BooleanField(
                default=False, help_text="Every agent the user's grants cover, now and later."
            ),
        ),
        migrations.AlterField(
            model_name="personaltoken",
            name="agents",
            field=models.ManyToManyField(
                blank=True,
                help_text="The agents it covers when not all agents (none: no agent).",
                related_name="personal_tokens",
                to="strategies.agent",
            ),
        ),
        migrations.RunPython(every_agent_where_none_named, migrations.RunPython.noop),
    ]

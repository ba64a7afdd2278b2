"""Runtime tokens: "every agent" becomes the explicit flag `all_agents`, no longer an empty
agent set (which deleting an agent could produce, widening its tokens to every agent). The
tokens whose agent set is empty today get all_agents=True, so nothing changes for them."""

from django.db import migrations, models


def every_agent_where_none_named(apps, schema_editor):
    RuntimeToken = apps.get_model("strategies", "RuntimeToken")
    RuntimeToken.objects.filter(agents__isnull=True).update(all_agents=True)


class Migration(migrations.Migration):
    dependencies = [
        ("strategies", "0008_onboarding_revert_policy_webhook_events"),
    ]

    operations = [
        migrations.AddField(
            model_name="runtimetoken",
            name="all_agents",
            field=models.BooleanField(default=False, help_text="Every agent, now and later."),
        ),
        migrations.AlterField(
            model_name="runtimetoken",
            name="agents",
            field=models.ManyToManyField(
                blank=True,
                help_text="The agents it covers when not all agents (none: no agent).",
                related_name="runtime_tokens",
                to="strategies.agent",
            ),
        ),
        migrations.RunPython(every_agent_where_none_named, migrations.RunPython.noop),
    ]

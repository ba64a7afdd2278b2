"""Single sign-on (issue 33): the identities people sign in with at a provider, the mappings
of a provider's groups to roles, and the grants such a mapping makes (Grant.mapping). A user
may hold one grant by hand and one per mapping of the same role on the same agent."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0009_manage_runtime_tokens_capability"),
        ("strategies", "0008_onboarding_revert_policy_webhook_events"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="GroupMapping",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "provider",
                    models.CharField(
                        help_text="The provider's key (OIDC_PROVIDERS), as its groups come from.",
                        max_length=50,
                    ),
                ),
                (
                    "group",
                    models.CharField(
                        help_text="The group's name as the provider sends it.", max_length=200
                    ),
                ),
                (
                    "role_name",
                    models.CharField(help_text="The role's name when mapped.", max_length=100),
                ),
                ("all_agents", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "agents",
                    models.ManyToManyField(
                        blank=True, related_name="group_mappings", to="strategies.agent"
                    ),
                ),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "role",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="group_mappings",
                        to="console.role",
                    ),
                ),
            ],
            options={
                "ordering": ["provider", "group", "role_name"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("provider", "group", "role"), name="group_mapping_unique_role"
                    )
                ],
            },
        ),
        migrations.AddField(
            model_name="grant",
            name="mapping",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="grants",
                to="console.groupmapping",
            ),
        ),
        migrations.RemoveConstraint(model_name="grant", name="grant_unique_user"),
        migrations.AddConstraint(
            model_name="grant",
            constraint=models.UniqueConstraint(
                condition=models.Q(("user__isnull", False)),
                fields=("user", "role", "agent", "mapping"),
                name="grant_unique_user",
                nulls_distinct=False,
            ),
        ),
        migrations.CreateModel(
            name="ExternalIdentity",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("provider", models.CharField(max_length=50)),
                ("subject", models.CharField(max_length=255)),
                ("email", models.CharField(blank=True, max_length=254)),
                (
                    "groups",
                    models.JSONField(blank=True, default=list, help_text="As of the last sign-in."),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("last_sign_in_at", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="external_identities",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["provider", "subject"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("provider", "subject"), name="external_identity_unique_subject"
                    )
                ],
            },
        ),
    ]

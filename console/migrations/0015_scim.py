import django.db.models.deletion
import django.db.models.functions.text
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0014_siem_destinations"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ScimUser",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("provider", models.CharField(max_length=50)),
                ("user_name", models.CharField(max_length=255)),
                ("external_id", models.CharField(blank=True, max_length=255)),
                ("active", models.BooleanField(default=True)),
                ("attributes", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="scim_links",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["provider", "user_name"],
            },
        ),
        migrations.CreateModel(
            name="ScimGroup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("provider", models.CharField(max_length=50)),
                ("display_name", models.CharField(max_length=255)),
                ("external_id", models.CharField(blank=True, max_length=255)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "members",
                    models.ManyToManyField(
                        blank=True, related_name="groups", to="console.scimuser"
                    ),
                ),
            ],
            options={
                "ordering": ["provider", "display_name"],
            },
        ),
        migrations.CreateModel(
            name="ScimToken",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("provider", models.CharField(max_length=50)),
                ("name", models.CharField(max_length=100)),
                ("prefix", models.CharField(max_length=16)),
                ("token_hash", models.CharField(max_length=64, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "revoked_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["provider", "-created_at", "-id"],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("revoked_at__isnull", True)),
                        fields=("provider", "name"),
                        name="scim_token_unique_name",
                    )
                ],
            },
        ),
        migrations.AddConstraint(
            model_name="scimuser",
            constraint=models.UniqueConstraint(
                django.db.models.functions.text.Lower("user_name"),
                models.F("provider"),
                name="scim_user_unique_user_name",
            ),
        ),
        migrations.AddConstraint(
            model_name="scimuser",
            constraint=models.UniqueConstraint(
                fields=("provider", "user"), name="scim_user_one_link_per_provider"
            ),
        ),
        migrations.AddConstraint(
            model_name="scimgroup",
            constraint=models.UniqueConstraint(
                django.db.models.functions.text.Lower("display_name"),
                models.F("provider"),
                name="scim_group_unique_display_name",
            ),
        ),
    ]

"""SAML 2.0 sign-in (issue 33, item 2): the assertions accepted, kept until their NotOnOrAfter
so that a replay is refused across processes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("console", "0010_single_sign_on")]

    operations = [
        migrations.CreateModel(
            name="SamlAssertion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("provider", models.CharField(max_length=50)),
                ("assertion_id", models.CharField(max_length=255, unique=True)),
                ("not_on_or_after", models.DateTimeField(db_index=True)),
                ("used_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={"ordering": ["used_at"]},
        ),
    ]

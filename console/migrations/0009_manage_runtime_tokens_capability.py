"""Runtime tokens get their own capability, manage_runtime_tokens (issue 32): before, they
came with manage_tokens, which now means webhooks only.

Nobody loses what they could do: every role that holds manage_tokens (the standard admin
role among them; fresh databases get it from 0002, which reads console.kernel.policy) and
every personal token whose scope names it gains manage_runtime_tokens beside it. A token
is not widened: its scope covered runtime tokens under the old name."""

from django.db import migrations

OLD, NEW = "manage_tokens", "manage_runtime_tokens"


def add(apps, schema_editor):
    for model in (apps.get_model("console", "Role"), apps.get_model("console", "PersonalToken")):
        for row in model.objects.filter(capabilities__contains=[OLD]):
            if NEW not in row.capabilities:
                row.capabilities = [*row.capabilities, NEW]
                row.save(update_fields=["capabilities"])


def remove(apps, schema_editor):
    for model in (apps.get_model("console", "Role"), apps.get_model("console", "PersonalToken")):
        for row in model.objects.filter(capabilities__contains=[NEW]):
            row.capabilities = [c for c in row.capabilities if c != NEW]
            row.save(update_fields=["capabilities"])


class Migration(migrations.Migration):
    dependencies = [("console", "0008_personal_token_all_agents_flag")]

    operations = [migrations.RunPython(add, remove)]

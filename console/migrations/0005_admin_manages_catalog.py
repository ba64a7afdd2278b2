"""The admin role gains manage_catalog (create and edit agents and environments).

Fresh databases get it from 0002 (which reads the standard roles from console.kernel.policy);
this adds it where the admin role already exists without it."""

from django.db import migrations

CAPABILITY = "manage_catalog"


def add(apps, schema_editor):
    Role = apps.get_model("console", "Role")
    for role in Role.objects.filter(name="admin", is_standard=True):
        if CAPABILITY not in role.capabilities:
            role.capabilities = [*role.capabilities, CAPABILITY]
            role.save(update_fields=["capabilities"])


def remove(apps, schema_editor):
    Role = apps.get_model("console", "Role")
    for role in Role.objects.filter(name="admin", is_standard=True):
        role.capabilities = [c for c in role.capabilities if c != CAPABILITY]
        role.save(update_fields=["capabilities"])


class Migration(migrations.Migration):
    dependencies = [("console", "0004_chain_checkpoints")]

    operations = [migrations.RunPython(add, remove)]

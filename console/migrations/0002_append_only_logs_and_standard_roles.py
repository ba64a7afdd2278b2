"""Append-only audit and access logs (trigger refuses UPDATE, DELETE, TRUNCATE) and the four
standard roles. Roles created later start with no capabilities."""

from django.db import migrations

TABLES = ["console_auditrecord", "console_accesslogentry"]

FUNCTION = """
CREATE OR REPLACE FUNCTION console_append_only() RETURNS trigger AS $$
BEGIN
    -- Only a database configured for tests (ALTER DATABASE ... SET console.allow_truncate)
    -- may be emptied between test cases; UPDATE and DELETE are refused everywhere.
    IF TG_OP = 'TRUNCATE' AND current_setting('console.allow_truncate', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""


def _triggers(table: str) -> str:
    return f"""
CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION console_append_only();
CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION console_append_only();
"""


SQL = FUNCTION + "".join(_triggers(t) for t in TABLES)
REVERSE = (
    "".join(
        f"DROP TRIGGER IF EXISTS {t}_append_only ON {t}; DROP TRIGGER IF EXISTS {t}_no_truncate ON {t};"
        for t in TABLES
    )
    + "DROP FUNCTION IF EXISTS console_append_only();"
)


# The standard roles as they were when this migration was written (frozen here: a migration
# must not depend on live code, which changes after it).
_ALL = [
    "view_config",
    "edit_drafts",
    "publish",
    "request_protected_publish",
    "approve",
    "rollback",
    "view_traces",
    "view_snapshots",
    "enable_sensitive",
    "manage_grants",
    "view_audit",
    "manage_tokens",
]
STANDARD_ROLES = {
    "viewer": ("Reads configuration.", ["view_config"]),
    "support": ("Investigates answers by request_id.", ["view_config", "view_traces"]),
    "operator": (
        "Edits and publishes strategies and profiles.",
        ["view_config", "edit_drafts", "publish", "request_protected_publish", "view_traces"],
    ),
    "admin": ("Everything, including rollback and access management.", _ALL),
}


def create_standard_roles(apps, schema_editor):
    role_model = apps.get_model("console", "Role")
    for name, (description, capabilities) in STANDARD_ROLES.items():
        role_model.objects.get_or_create(
            name=name,
            defaults={
                "description": description,
                "capabilities": capabilities,
                "is_standard": True,
            },
        )


def remove_standard_roles(apps, schema_editor):
    apps.get_model("console", "Role").objects.filter(is_standard=True).delete()


class Migration(migrations.Migration):
    dependencies = [("console", "0001_initial")]
    operations = [
        migrations.RunSQL(SQL, REVERSE),
        migrations.RunPython(create_standard_roles, remove_standard_roles),
    ]

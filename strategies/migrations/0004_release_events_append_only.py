"""Release history is append-only, like the audit log (same trigger function)."""

from django.db import migrations

TABLE = "strategies_releaseevent"
SQL = f"""
CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION console_append_only();
CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION console_append_only();
"""
REVERSE = f"""
DROP TRIGGER IF EXISTS {TABLE}_append_only ON {TABLE};
DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE};
"""


class Migration(migrations.Migration):
    dependencies = [
        ("strategies", "0003_releases_and_runtime_tokens"),
        ("console", "0002_append_only_logs_and_standard_roles"),
    ]
    operations = [migrations.RunSQL(SQL, REVERSE)]

"""The database, not only Python, refuses any change to a frozen version."""

from django.db import migrations

SQL = """
CREATE OR REPLACE FUNCTION strategies_version_immutable() RETURNS trigger AS $$
BEGIN
    IF OLD.state = 'frozen' THEN
        RAISE EXCEPTION 'version % of document % is frozen and cannot be changed', OLD.number, OLD.document_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER strategies_version_immutable
    BEFORE UPDATE OR DELETE ON strategies_version
    FOR EACH ROW EXECUTE FUNCTION strategies_version_immutable();
"""

REVERSE = """
DROP TRIGGER IF EXISTS strategies_version_immutable ON strategies_version;
DROP FUNCTION IF EXISTS strategies_version_immutable();
"""


class Migration(migrations.Migration):
    dependencies = [("strategies", "0001_initial")]
    operations = [migrations.RunSQL(SQL, REVERSE)]

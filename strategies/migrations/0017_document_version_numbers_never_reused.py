import re

import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models

import console.kernel.guards

# "<agent>/<document> v<number> (<state>)": how the audit names a version (Version.__str__).
VERSION_LABEL = re.compile(r"^(?P<agent>[^/]+)/(?P<document>\S+) v(?P<number>\d+) \(")


def highest_numbers_ever_given(apps, schema_editor):
    """Each document's counter starts past every number it gave: its versions', and those of
    drafts discarded before this migration (the audit's draft rows name them)."""
    Document = apps.get_model("strategies", "Document")
    Version = apps.get_model("strategies", "Version")
    AuditRecord = apps.get_model("console", "AuditRecord")
    highest: dict[tuple[str, str], int] = {}
    for agent, document, number in Version.objects.values_list(
        "document__agent__key", "document__key", "number"
    ):
        highest[(agent, document)] = max(highest.get((agent, document), 0), number)
    drafts = AuditRecord.objects.filter(
        action__in=["draft.create", "draft.discard"], target_type="strategies.version"
    ).values_list("target_label", flat=True)
    for label in drafts.iterator():
        found = VERSION_LABEL.match(label)
        if found:
            key = (found["agent"], found["document"])
            highest[key] = max(highest.get(key, 0), int(found["number"]))
    for document in Document.objects.select_related("agent"):
        number = highest.get((document.agent.key, document.key), 0)
        if number:
            Document.objects.filter(pk=document.pk).update(last_version_number=number)


class Migration(migrations.Migration):
    dependencies = [
        ("strategies", "0016_release_history_times"),
        ("console", "0008_personal_token_all_agents_flag"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="last_version_number",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(highest_numbers_ever_given, migrations.RunPython.noop),
        pgtrigger.migrations.AddTrigger(
            model_name="document",
            trigger=pgtrigger.compiler.Trigger(
                name="version_numbers_never_go_back",
                sql=console.kernel.guards.GuardTriggerSql(
                    condition='WHEN (NEW."last_version_number" < (OLD."last_version_number"))',
                    func="RAISE EXCEPTION 'document %: version numbers are never given twice', OLD.id USING ERRCODE = 'integrity_constraint_violation';",
                    hash="52c79415271ea6b8827c11c58f5e137eb08d5ae3",
                    operation="UPDATE",
                    pgid="pgtrigger_version_numbers_never_go_back_5a1b9",
                    table="strategies_document",
                    when="BEFORE",
                ),
            ),
        ),
    ]

"""Walk the audit log's and the access log's hash chains; name the first broken record.

Exit code 0 when both chains are intact, 1 otherwise — suitable for a nightly cron/CI check.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.audit import chain_verify
from console.models import AccessLogEntry, AuditRecord


class Command(BaseCommand):
    help = "Verify the hash chains of the audit log and the access log (tamper evidence)."

    def handle(self, *args, **options):
        broken = []
        for model, label in ((AuditRecord, "audit log"), (AccessLogEntry, "access log")):
            checked, first_broken = chain_verify(model)
            if first_broken is None:
                self.stdout.write(self.style.SUCCESS(f"{label}: {checked} records, chain intact"))
                continue
            message = (
                f"{label}: chain BROKEN at record #{first_broken.pk} "
                f"({first_broken.occurred_at:%Y-%m-%d %H:%M:%S} UTC, {first_broken.action}, "
                f"{first_broken.target_label or 'no target'}) after {checked} intact records: "
                "its content or its link to the previous record was altered"
            )
            self.stderr.write(self.style.ERROR(message))
            broken.append(message)
        if broken:
            raise CommandError(f"{len(broken)} chain(s) broken; see above.")

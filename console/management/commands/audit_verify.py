"""Walk the audit log's and the access log's hash chains; name the first broken record, and
check each chain still reaches its checkpoints (a deleted tail) and the anchors given.

Exit code 0 when both chains are intact, 1 otherwise — suitable for a nightly cron/CI check.
"""

from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError

from console.kernel.audit import CHAIN_LOGS, chain_verify
from console.kernel.wording import counted

ANCHOR = re.compile(r"^(?P<log>[a-z]+):(?P<id>\d+):(?P<hash>[0-9a-f]{64})$")
SHOWN_PER_KIND = 5  # breaks and checkpoint problems listed per log; the rest are counted
WHY = {
    "content": "its content was altered (its hash no longer matches it)",
    "link": "the record before it is missing or was altered (its link to the previous "
    "record does not match)",
}


class Command(BaseCommand):
    help = (
        "Verify the hash chains of the audit log and the access log (tamper evidence): every "
        "link, and that each chain still reaches its checkpoints."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--anchor",
            action="append",
            default=[],
            metavar="LOG:ID:HASH",
            help="A chain head taken from the application log (logger console.kernel.audit.anchor), "
            "e.g. audit:1234:<sha256>; the record must still exist with that hash. Repeatable.",
        )

    def handle(self, *args, **options):
        anchors = self._anchors(options["anchor"])
        broken = []
        for log, model in CHAIN_LOGS.items():
            label = log.label
            report = chain_verify(model, anchors.get(log, {}).items())
            if report.intact:
                self.stdout.write(self.style.SUCCESS(self._intact(label, report)))
                continue
            for message in self._problems(label, report):
                self.stderr.write(self.style.ERROR(message))
            broken.append(label)
        if broken:
            raise CommandError(f"{counted(len(broken), 'chain')} broken; see above.")

    @staticmethod
    def _anchors(values: list[str]) -> dict[str, dict[int, str]]:
        anchors: dict[str, dict[int, str]] = {}
        for value in values:
            match = ANCHOR.match(value.strip().lower())
            if match is None or match["log"] not in CHAIN_LOGS:
                raise CommandError(
                    f"--anchor {value!r}: expected LOG:ID:HASH with LOG one of "
                    f"{', '.join(CHAIN_LOGS)} and a 64-character sha256 hash"
                )
            anchors.setdefault(match["log"], {})[int(match["id"])] = match["hash"]
        return anchors

    @staticmethod
    def _intact(label: str, report) -> str:
        message = f"{label}: {counted(report.checked, 'record')}, chain intact"
        if report.reached is not None:
            checkpoint = report.reached
            message += (
                f", reaches checkpoint #{checkpoint.pk} "
                f"({checkpoint.created_at:%Y-%m-%d %H:%M:%S} UTC, up to #{checkpoint.last_id})"
            )
        if report.anchors_matched:
            message += ", matches anchor " + ", ".join(f"#{i}" for i in report.anchors_matched)
        return message

    @staticmethod
    def _problems(label: str, report) -> list[str]:
        messages = []
        if report.breaks:
            first = report.breaks[0]
            row = first.row
            messages.append(
                f"{label}: chain BROKEN at record #{row.pk} "
                f"({row.occurred_at:%Y-%m-%d %H:%M:%S} UTC, {row.action}, "
                f"{row.target_label or 'no target'}) after {report.intact_before} intact "
                f"records: {WHY[first.kind]}"
            )
            later = report.breaks[1 : SHOWN_PER_KIND + 1]
            if later:
                shown = ", ".join(f"#{b.row.pk} ({b.kind})" for b in later)
                more = report.broken - 1 - len(later)
                messages.append(
                    f"{label}: {report.broken - 1} more broken records: {shown}"
                    + (f" and {more} more" if more > 0 else "")
                )
        for problem in report.problems[:SHOWN_PER_KIND]:
            messages.append(f"{label}: {problem}")
        more = report.unreached - SHOWN_PER_KIND
        if more > 0:
            messages.append(f"{label}: and {more} more checkpoints or anchors not reached")
        return messages

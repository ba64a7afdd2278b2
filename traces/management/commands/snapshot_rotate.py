"""Re-encrypt every snapshot with the newest key in SNAPSHOT_KEYS (after prepending one)."""

from django.core.management.base import BaseCommand

from console.kernel.wording import counted
from traces import crypto, services


class Command(BaseCommand):
    help = "Re-encrypt stored snapshots with the newest SNAPSHOT_KEYS key."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=500)

    def handle(self, *args, **options):
        count = services.snapshots_rotate(batch_size=options["batch_size"])
        self.stdout.write(
            f"Re-encrypted {counted(count, 'snapshot')} with key {crypto.current_key_id()}. "
            "Older keys can be removed from SNAPSHOT_KEYS once no snapshot uses them."
        )

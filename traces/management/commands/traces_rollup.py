"""Recompute hourly trace counts for a range of hours (backfill); the beat job does recent ones."""

from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from console.kernel.wording import counted
from traces import services


class Command(BaseCommand):
    help = "Recompute the hourly trace rollups of the last N hours (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--hours", type=int, default=24 * 7)

    def handle(self, *args, **options):
        now = timezone.now().replace(minute=0, second=0, microsecond=0)
        for back in range(options["hours"], 0, -1):
            services.rollup_hour_refresh(hour=now - timedelta(hours=back))
        self.stdout.write(f"Rolled up {counted(options['hours'], 'hour')}.")

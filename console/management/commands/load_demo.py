"""Load the demo world of DEMO.md, idempotently. Refuses to run with production settings."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.demo.users import DEMO_USERS
from console.demo.world import load_world


class Command(BaseCommand):
    help = "Load the demo scenario (agents, environments, users, documents, releases, traces)."

    def add_arguments(self, parser):
        parser.add_argument("--quiet-logins", action="store_true", help="Do not print demo logins.")

    def handle(self, *args, **options):
        if settings.PRODUCTION or not settings.DEMO_MODE:
            raise CommandError(
                "load_demo refuses to run with production settings (CONSOLE_ENV=production)."
            )
        load_world(stdout=self.stdout)
        self.stdout.write(self.style.SUCCESS("Demo data loaded."))
        if not options["quiet_logins"]:
            self.stdout.write("Demo logins (username / password):")
            for username, _ in DEMO_USERS:
                self.stdout.write(f"  {username:<8} / {username}-demo")

"""Load the demo world of DEMO.md, idempotently. Refuses to run with production settings."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

# Each app's demo loader, in dependency order. Each must be idempotent.
LOADERS = ["strategies.demo", "console.demo", "strategies.demo_releases", "traces.demo"]


class Command(BaseCommand):
    help = "Load the demo scenario (agents, environments, users, documents, releases, traces)."

    def add_arguments(self, parser):
        parser.add_argument("--quiet-logins", action="store_true", help="Do not print demo logins.")

    def handle(self, *args, **options):
        if settings.PRODUCTION or not settings.DEMO_MODE:
            raise CommandError(
                "load_demo refuses to run with production settings (CONSOLE_ENV=production)."
            )
        from importlib import import_module
        from importlib.util import find_spec

        for name in LOADERS:
            if find_spec(name) is None:
                continue
            with transaction.atomic():
                import_module(name).load(stdout=self.stdout)
        self.stdout.write(self.style.SUCCESS("Demo data loaded."))
        if not options["quiet_logins"]:
            from console.demo import DEMO_USERS

            self.stdout.write("Demo logins (username / password):")
            for username, _ in DEMO_USERS:
                self.stdout.write(f"  {username:<8} / {username}-demo")

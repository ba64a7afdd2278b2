"""Write an agent's documents to a directory, one JSON file per document, for review in git."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from strategies.catalog.models import Agent
from strategies.documents import selectors


class Command(BaseCommand):
    help = (
        "Export an agent's documents: DIR/<document>.json with the latest frozen version and "
        "the open draft, if any. Stable formatting, so a diff shows only real changes."
    )

    def add_arguments(self, parser):
        parser.add_argument("agent", help="Agent key, e.g. assistant_professional.")
        parser.add_argument("directory", help="Where to write the files (created if missing).")

    def handle(self, *args, **options):
        agent = Agent.objects.filter(key=options["agent"]).first()
        if agent is None:
            raise CommandError(f"There is no agent {options['agent']}.")
        directory = Path(options["directory"])
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in selectors.agent_export_files(agent=agent).items():
            (directory / name).write_text(text, encoding="utf-8")
            self.stdout.write(f"wrote {directory / name}")

"""What export_agent and import_agent share: the two halves of one file format, both run as
`manage.py <command> AGENT DIRECTORY`."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from strategies.catalog.models import Agent


class AgentDirectoryCommand(BaseCommand):
    """Takes an agent key and a directory; `handle_agent` gets the Agent and the Path."""

    directory_help = ""

    def add_arguments(self, parser):
        parser.add_argument("agent", help="Agent key, e.g. assistant_professional.")
        parser.add_argument("directory", help=self.directory_help)

    def handle(self, *args, **options):
        agent = Agent.objects.filter(key=options["agent"]).first()
        if agent is None:
            raise CommandError(f"There is no agent {options['agent']}.")
        self.handle_agent(agent, Path(options["directory"]))

    def handle_agent(self, agent: Agent, directory: Path) -> None:
        raise NotImplementedError

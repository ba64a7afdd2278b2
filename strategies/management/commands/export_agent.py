"""Write an agent's configuration to one file, for review in git (docs/CONFIG_AS_CODE.md)."""

from __future__ import annotations

from django.core.management.base import CommandError

from strategies.catalog.models import Agent
from strategies.exchange.services import config_export_text
from strategies.management.agent_file import AgentFileCommand, acting_user


class Command(AgentFileCommand):
    help = (
        "Export an agent's configuration: every document with its frozen versions and open "
        "draft, and what is live in each environment, as one JSON file with stable "
        "formatting, so a diff shows only real changes. '-' writes to standard output."
    )
    file_help = "Where to write the file (its folder must exist), or - for standard output."

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--as", dest="as_user", metavar="USERNAME", help="Record the export as this user."
        )

    def handle_file(self, agent_key, path, options):
        agent = Agent.objects.filter(key=agent_key).first()
        if agent is None:
            raise CommandError(f"There is no agent {agent_key}.")
        text = config_export_text(agent=agent, actor=acting_user(options["as_user"]))
        if str(path) == "-":
            self.stdout.write(text, ending="")
            return
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot write {path}: {exc.strerror}.") from exc
        self.stderr.write(f"wrote {path}")

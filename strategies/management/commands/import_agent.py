"""Read an agent's documents back from files written by export_agent, as drafts."""

from __future__ import annotations

from django.core.management.base import CommandError

from console.errors import ApplicationError
from strategies.documents import services
from strategies.management.agent_directory import AgentDirectoryCommand


class Command(AgentDirectoryCommand):
    help = (
        "Import DIR/*.json into an agent: each changed document gets a draft (validated like "
        "any edit); unchanged documents create nothing. All files or none are applied."
    )
    directory_help = "A directory written by export_agent."

    def handle_agent(self, agent, directory):
        if not directory.is_dir():
            raise CommandError(f"{directory} is not a directory.")
        files = {
            path.name: path.read_text(encoding="utf-8") for path in sorted(directory.glob("*.json"))
        }
        if not files:
            raise CommandError(f"{directory} has no .json files.")
        try:
            results = services.agent_import(agent=agent, files=files, actor=None)
        except ApplicationError as exc:
            details = "\n".join(f"  {d.get('path')}: {d.get('message')}" for d in exc.details)
            raise CommandError(f"{exc.message}\n{details}".rstrip()) from exc
        for name, outcome in results:
            self.stdout.write(f"{name}: {outcome}")

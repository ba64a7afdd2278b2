"""Write an agent's documents to a directory, one JSON file per document, for review in git."""

from __future__ import annotations

from strategies.documents import selectors
from strategies.management.agent_directory import AgentDirectoryCommand


class Command(AgentDirectoryCommand):
    help = (
        "Export an agent's documents: DIR/<document>.json with the latest frozen version and "
        "the open draft, if any. Stable formatting, so a diff shows only real changes."
    )
    directory_help = "Where to write the files (created if missing)."

    def handle_agent(self, agent, directory):
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in selectors.agent_export_files(agent=agent).items():
            (directory / name).write_text(text, encoding="utf-8")
            self.stdout.write(f"wrote {directory / name}")

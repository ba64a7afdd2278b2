"""What export_agent and import_agent share: both run as `manage.py <command> AGENT FILE`,
on one agent's configuration file (docs/CONFIG_AS_CODE.md), through the same services as
the page and the API."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console.kernel.errors import ApplicationError


class AgentFileCommand(BaseCommand):
    """Takes an agent key and a file path; `handle_file` gets both. Application errors come
    out as one CommandError listing every finding at its path."""

    file_help = ""

    def add_arguments(self, parser):
        parser.add_argument("agent", help="Agent key, e.g. assistant_professional.")
        parser.add_argument("file", help=self.file_help)

    def handle(self, *args, **options):
        try:
            self.handle_file(options["agent"], Path(options["file"]), options)
        except ApplicationError as exc:
            raise CommandError(explain(exc)) from exc

    def handle_file(self, agent_key: str, path: Path, options) -> None:
        raise NotImplementedError


def explain(exc: ApplicationError) -> str:
    lines = [exc.message] + [
        f"  {d.get('path') or '(file)'}: {d.get('message')}" for d in exc.details
    ]
    return "\n".join(lines)


def acting_user(username: str | None):
    """The person a command acts as (`--as USERNAME`): their grants apply and the audit names
    them. Without it the command acts as the system (the operator's shell access)."""
    if not username:
        return None
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f"There is no active user {username}.")
    return user

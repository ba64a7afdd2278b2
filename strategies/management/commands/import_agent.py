"""Apply a configuration file to an agent, with a dry run (docs/CONFIG_AS_CODE.md)."""

from __future__ import annotations

from django.core.management.base import CommandError

from console.kernel.limits import too_large
from strategies.exchange.format import MAX_FILE_BYTES, file_parse_text
from strategies.exchange.services import config_apply, config_dry_run
from strategies.management.agent_file import AgentFileCommand, acting_user


class Command(AgentFileCommand):
    help = (
        "Import a file written by export_agent: new versions for changed documents (frozen "
        "versions never change), then publishes where the file's live map differs — only "
        "where the user may, as approval requests where the environment is protected. All "
        "or nothing. --dry-run shows the plan and writes nothing."
    )
    file_help = "A file written by export_agent (or downloaded from the agent's page)."

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--dry-run", action="store_true", help="Show the plan only.")
        parser.add_argument(
            "--as",
            dest="as_user",
            metavar="USERNAME",
            help="Act as this user: their grants decide (publishing and creating an agent "
            "need one), and the audit names them. Without it: the system, documents only.",
        )

    def handle_file(self, agent_key, path, options):
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from exc
        if len(raw) > MAX_FILE_BYTES:
            raise too_large("The configuration file", MAX_FILE_BYTES)
        data = file_parse_text(raw)
        actor = acting_user(options["as_user"])
        if options["dry_run"]:
            plan = config_dry_run(agent_key=agent_key, data=data, actor=actor)
            self._report(plan, dry_run=True)
            return
        plan, outcome = config_apply(agent_key=agent_key, data=data, actor=actor)
        self._report(plan, dry_run=False)
        for item in outcome.requested:
            self.stdout.write(
                f"approval request #{item['approval']}: {item['document']} "
                f"v{item['number']} → {item['environment']}"
            )

    def _report(self, plan, *, dry_run: bool) -> None:
        would = "would " if dry_run else ""
        if not plan.agent_exists:
            self.stdout.write(f"agent {plan.agent_key}: {would}create")
        for doc in plan.documents:
            if not doc.exists:
                self.stdout.write(f"{doc.key}: {would}create the document")
            for step in doc.creates:
                summary = "; ".join(c.summary for c in step.changes) or "same content"
                self.stdout.write(f"{doc.key}: {would}add v{step.number} ({summary})")
            if doc.draft and doc.draft.action in ("create", "update"):
                self.stdout.write(f"{doc.key}: {would}{doc.draft.action} draft v{doc.draft.number}")
            if not doc.changed:
                self.stdout.write(f"{doc.key}: unchanged")
        for step in plan.releases:
            where = f"{step.environment}/{step.document}"
            if step.action == "publish":
                self.stdout.write(f"{where}: {would}publish v{step.number}")
            elif step.action == "request":
                self.stdout.write(f"{where}: {would}request approval for v{step.number}")
            elif step.action == "skip":
                self.stdout.write(f"{where}: skipped — {step.reason}")
        for note in plan.notes:
            self.stdout.write(f"note: {note}")
        if not plan.changes_anything:
            self.stdout.write("Nothing to change.")

"""Record what an environment's runtime implements from a JSON file (docs/runtime-contract.md §2 wire form)."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from console.kernel import strict_json
from console.kernel.errors import ApplicationError
from strategies.catalog.selectors import environment_get
from strategies.catalog.services import manifest_record


class Command(BaseCommand):
    help = "Load a manifest file for an environment. An identical manifest creates no new version."

    def add_arguments(self, parser):
        parser.add_argument("--environment", required=True, help="Environment key, e.g. bank-uat.")
        parser.add_argument("file", help="Path to the manifest JSON.")

    def handle(self, *args, **options):
        path = Path(options["file"])
        try:
            text = path.read_text(encoding="utf-8")
            body = json.loads(text)
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from exc
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path} is not valid JSON: {exc}.") from exc
        repeated = strict_json.duplicate_key(text)
        if repeated is not None:
            raise CommandError(f"{path} is not valid: {repeated.message}")
        try:
            environment = environment_get(key=options["environment"])
            manifest, created = manifest_record(
                environment=environment,
                body=body,
                runtime=body.get("runtime", "") if isinstance(body, dict) else "",
                reported_by=f"manifest_load {path.name}",
            )
        except ApplicationError as exc:
            raise CommandError(_explain(exc)) from exc
        if created:
            self.stdout.write(
                self.style.SUCCESS(f"{environment.key}: manifest v{manifest.version} recorded.")
            )
        else:
            self.stdout.write(f"{environment.key}: unchanged, still manifest v{manifest.version}.")


def _explain(exc: ApplicationError) -> str:
    lines = [exc.message] + [
        f"  {d.get('path') or '(top)'}: {d.get('message')}" for d in exc.details
    ]
    return "\n".join(lines)

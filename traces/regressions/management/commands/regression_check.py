"""Check a configuration file (config as code) against the regression sets of its agent and
write JUnit XML: `manage.py regression_check agent.json --junit out.xml`. Exit 1 when a
member fails (and, with --strict, when one cannot be judged or a set has no member left), so
a CI job gates the pull request. The same selectors as the check API; reading the kept requests is in the access log.
"""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from console.kernel.audit import SystemActor
from console.kernel.errors import ApplicationError
from traces.regressions import checks, junit, selectors, services


class Command(BaseCommand):
    help = "Check a configuration file against its agent's regression sets; write JUnit XML."

    def add_arguments(self, parser):
        parser.add_argument("file", help="The agent's configuration file (config as code).")
        parser.add_argument("--junit", dest="junit_path", help="Write JUnit XML here.")
        parser.add_argument(
            "--strict",
            action="store_true",
            help="Fail also when a member is not checkable or a set is empty.",
        )

    def handle(self, *args, file, junit_path=None, strict=False, **options):
        try:
            text = Path(file).read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc}") from exc
        try:
            parsed, strategies = selectors.file_strategies(text)
            agent = selectors.agent_of_file(parsed)
            found = selectors.file_check(agent=agent, strategies=strategies).checks
        except ApplicationError as exc:
            shown = "; ".join(f"{d.get('path')}: {d.get('message')}" for d in exc.details[:10])
            raise CommandError(f"{exc.message} {shown}".strip()) from exc
        services.regression_look_record(
            actor=SystemActor("regression_check"),
            checked=True,
            regression_set=None,
            agent=agent,
            detail={"checked": [c.label for c in found][:20], "file": Path(file).name[:200]},
        )
        if junit_path:
            Path(junit_path).write_text(junit.junit_xml(found), encoding="utf-8")
        outcome = selectors.overall_outcome(found)
        for set_check in found:
            t = set_check.totals
            if set_check.outcome == checks.EMPTY:
                self.stdout.write(
                    f"{set_check.regression_set.name} ({set_check.label}): EMPTY — "
                    f"{junit.EMPTY_MESSAGE.removeprefix('empty: ')}"
                )
                continue
            self.stdout.write(
                f"{set_check.regression_set.name} ({set_check.label}): {t.passed} passed, "
                f"{t.failed} failed, {t.not_checkable} not checkable"
            )
            for member in set_check.results:
                for result in member.results:
                    if result.outcome != checks.PASSED:
                        self.stdout.write(
                            f"  {result.outcome.upper()} {member.request_id} "
                            f"({member.environment}): {result.words} — {result.message}"
                        )
        if not found:
            self.stdout.write(f"{agent.key} has no regression sets of the file's strategies.")
        if outcome == checks.FAILED or (strict and outcome != checks.PASSED):
            sys.exit(1)

"""A runtime reports what it implements (docs/runtime-contract.md §2)."""

from __future__ import annotations

from dataclasses import dataclass

from console.kernel.audit import actor_label
from console.kernel.errors import Forbidden
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment, Manifest
from strategies.catalog.services import manifest_record
from strategies.releases.selectors import live_findings


@dataclass(frozen=True)
class ManifestReport:
    manifest: Manifest
    created: bool
    warnings: list[dict]


MANIFEST_SCOPE_MESSAGE = (
    "A manifest describes the runtime of the whole environment (every agent's sections, "
    "including which are sensitive), so only a token for all agents may write it; this token "
    "is limited to some agents. Report the manifest with an all-agents token."
)


def manifest_writer_check(actor) -> None:
    """403 for a runtime token not for every agent (limited to some, or to none once they
    are deleted): a manifest is environment-wide (it could declassify a sensitive section
    for agents the token does not cover)."""
    if not getattr(actor, "all_agents", False):
        raise Forbidden(MANIFEST_SCOPE_MESSAGE)


@service_transaction(durable=True)
def manifest_report(*, environment: Environment, body, actor) -> ManifestReport:
    """A runtime reports what it implements (docs/runtime-contract.md §2): stored by the one manifest
    service (an identical manifest keeps its version), then the live releases it no longer
    supports come back as warnings. Only an all-agents token may report it."""
    manifest_writer_check(actor)
    manifest, created = manifest_record(
        environment=environment, body=body, reported_by=actor_label(actor), actor=actor
    )
    return ManifestReport(
        manifest=manifest, created=created, warnings=live_findings(environment=environment)
    )

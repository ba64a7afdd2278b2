"""A runtime reports what it implements (docs/runtime-contract.md §2)."""

from __future__ import annotations

from dataclasses import dataclass

from console.audit import actor_label
from console.policy import service_transaction
from strategies.catalog.models import Environment, Manifest
from strategies.catalog.services import manifest_record
from strategies.releases.selectors import live_findings


@dataclass(frozen=True)
class ManifestReport:
    manifest: Manifest
    created: bool
    warnings: list[dict]


@service_transaction
def manifest_report(*, environment: Environment, body, actor) -> ManifestReport:
    """A runtime reports what it implements (docs/runtime-contract.md §2): stored by the one manifest
    service (an identical manifest keeps its version), then the live releases it no longer
    supports come back as warnings."""
    manifest, created = manifest_record(
        environment=environment, body=body, reported_by=actor_label(actor), actor=actor
    )
    return ManifestReport(
        manifest=manifest, created=created, warnings=live_findings(environment=environment)
    )

"""Writes about what exists: the manifests runtimes report."""

from __future__ import annotations

from context_runtime import canonical
from context_runtime.findings import blocking
from context_runtime.manifest import Manifest as RuntimeManifest
from context_runtime.manifest import validate_manifest

from console.audit import audit_record
from console.errors import ValidationFailed
from console.policy import service_transaction
from strategies.catalog.models import Environment, Manifest


@service_transaction
def manifest_record(
    *, environment: Environment, body: dict, runtime: str = "", reported_by: str = "", actor=None
) -> tuple[Manifest, bool]:
    """Store what the runtime of `environment` implements. An identical body (same content
    hash as the latest version) creates nothing: returns (latest, False)."""
    problems = blocking(validate_manifest(body))
    if problems:
        raise ValidationFailed("The manifest is not valid.", details=problems)
    # Lock the environment row: concurrent reports get consecutive version numbers.
    Environment.objects.select_for_update().filter(pk=environment.pk).first()
    # Normalised wire form: the order of names does not make a manifest different.
    wire = RuntimeManifest.from_dict(body, name=environment.key).to_dict()
    digest = canonical.content_hash(wire)
    latest = environment.manifests.order_by("-version").first()
    if latest is not None and latest.content_hash == digest:
        return latest, False
    manifest = Manifest.objects.create(
        environment=environment,
        version=(latest.version + 1) if latest else 1,
        runtime=runtime or str(body.get("runtime", ""))[:200],
        body=wire,
        content_hash=digest,
        reported_by=reported_by[:200],
    )
    audit_record(
        actor=actor,
        action="manifest.record",
        target=manifest,
        before={"version": latest.version, "body": latest.body} if latest else None,
        after={"version": manifest.version, "runtime": manifest.runtime, "body": wire},
    )
    return manifest, True

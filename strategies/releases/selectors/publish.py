"""The publish judgement — what `release_publish` would refuse, asked without writing —
and the preview of what a publish or a rollback would change; what is live and what waits
for a document in an environment, and the versions that may be published."""

from __future__ import annotations

from dataclasses import dataclass

from context_runtime.diff import diff_bodies
from context_runtime.findings import Finding, blocking

from strategies.catalog.models import Environment, Manifest
from strategies.catalog.selectors import (
    ValidationContext,
    body_findings,
    environment_list,
    manifest_latest,
    sensitive_sections_on,
)
from strategies.documents.models import Document, Version
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.selectors.golive import Candidate, Path, go_live_refusals


def publish_refusals(
    *, version: Version, environment: Environment, actor, expected_revision: int | None = None
) -> list[Finding]:
    """Everything `release_publish` would say to putting `version` live in `environment` as
    `actor`, nothing written: its refusals (severity error) in the order it raises them, and,
    for a protected environment, the flag that it asks a second person instead
    (`approval_required`). `expected_revision`: the release revision the caller loaded."""
    document = version.document
    return body_publish_refusals(
        actor=actor,
        agent=document.agent,
        environment=environment,
        document_key=document.key,
        kind=document.kind,
        number=version.number,
        body=version.body,
        live=live_release(document=document, environment=environment),
        pending=pending_for(document=document, environment=environment),
        expected_revision=expected_revision,
    )


def body_publish_refusals(
    *,
    actor,
    agent,
    environment: Environment,
    document_key: str,
    kind: str,
    number: int | None,
    body,
    live: Release | None,
    pending: ApprovalRequest | None,
    expected_revision: int | None = None,
    context: ValidationContext | None = None,
) -> list[Finding]:
    """`publish_refusals` for a body that may not be a version here yet (an import's): `agent`
    None for an agent not created yet, `number` None for a version not created yet; `live` and
    `pending` as read for the document here, `context` to judge many bodies against one
    environment. The go-live judgement of a plain publish (`golive.Path.PUBLISH`)."""
    return go_live_refusals(
        Path.PUBLISH,
        Candidate(agent, document_key, kind, number, body),
        environment=environment,
        actor=actor,
        live=live,
        pending=pending,
        expected_revision=expected_revision,
        context=context,
    )


# --- what is live and what waits; what a publish or a rollback would change ---------------------
def live_release(*, document, environment) -> Release | None:
    return (
        Release.objects.select_related("version", "document__agent", "environment")
        .filter(document=document, environment=environment)
        .first()
    )


def pending_for(*, document, environment) -> ApprovalRequest | None:
    """The request waiting for document × environment (at most one), if any."""
    return (
        ApprovalRequest.objects.select_related("version", "requested_by", "document__agent")
        .filter(document=document, environment=environment, status=ApprovalRequest.Status.PENDING)
        .first()
    )


def target_findings(*, version: Version, environment: Environment) -> list[Finding]:
    """Every finding for `version` against what `environment`'s runtime implements now."""
    return body_findings(kind=version.document.kind, body=version.body, environment=environment)


def publishable_versions(*, document) -> list[Version]:
    return list(document.versions.order_by("-number"))


@dataclass
class ChangePreview:
    """What a publish or rollback of `version` in `environment` would do."""

    version: Version
    environment: Environment
    live: Release | None
    changes: list
    findings: list  # every finding against the target manifest
    blocking: list
    sensitive: list[str]
    manifest_version: int | None
    live_in: list[str]  # environments where this version is live now
    skipped: list[str]  # earlier environments (promotion order) where it is not live
    manifest: Manifest | None = None  # what the check ran against: who reported it, when


def change_preview(*, version: Version, environment: Environment) -> ChangePreview:
    live = live_release(document=version.document, environment=environment)
    findings = target_findings(version=version, environment=environment)
    live_in = list(
        Release.objects.filter(version=version)
        .order_by("environment__position")
        .values_list("environment__key", flat=True)
    )
    manifest_row = manifest_latest(environment=environment)
    return ChangePreview(
        version=version,
        environment=environment,
        live=live,
        changes=diff_bodies(
            version.document.kind, live.version.body if live else None, version.body
        ),
        findings=findings,
        blocking=blocking(findings),
        sensitive=sensitive_sections_on(version.body)
        if version.document.kind == Document.Kind.PROFILE
        else [],
        manifest_version=manifest_row.version if manifest_row else None,
        manifest=manifest_row,
        live_in=live_in,
        skipped=[
            e.key
            for e in environment_list()
            if e.position < environment.position and e.key not in live_in
        ],
    )

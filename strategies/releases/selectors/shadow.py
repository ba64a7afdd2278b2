"""Reads for shadow releases: the shadow of a document in an environment, what
`shadow_start` would refuse (asked without writing), and the preview the shadow page
shows (shared with the rollout start page)."""

from __future__ import annotations

from dataclasses import dataclass, field

from context_runtime.diff import diff_bodies
from context_runtime.findings import Finding, blocking
from context_runtime.manifest import SHADOW

from console.kernel.policy import shadow_refusal
from strategies.catalog.models import Environment, Manifest
from strategies.catalog.selectors import (
    manifest_latest,
    runtime_feature_finding,
    validation_context,
)
from strategies.documents.models import Document, Version
from strategies.releases.models import Release, ShadowRelease
from strategies.releases.selectors.publish import live_release
from strategies.releases.selectors.refusals import (
    NOT_A_STRATEGY,
    NOT_FROZEN,
    NOTHING_LIVE,
    SHADOW_RUNNING,
    STALE_REVISION,
    UNREVIEWED,
    is_runtime_finding,
    target_refusals,
)
from strategies.releases.transitions import shadow_allows


# --- shadow releases ----------------------------------------------------------------------------
def shadow_get(*, document, environment) -> ShadowRelease | None:
    """The shadow row of document × environment — running, or stopped (`version` None) —
    or None when no shadow was ever started there."""
    return (
        ShadowRelease.objects.select_related("version", "document__agent", "environment")
        .filter(document=document, environment=environment)
        .first()
    )


def running_shadow(*, document, environment) -> ShadowRelease | None:
    shadow = shadow_get(document=document, environment=environment)
    return shadow if shadow is not None and shadow.running else None


def shadow_refusals(
    *, version: Version, environment: Environment, actor, expected_revision: int | None = None
) -> list[Finding]:
    """Everything `shadow_start` would say to running `version` as shadow in `environment`,
    nothing written, in the order it raises them: who may (`shadow_refusal`), what a shadow
    is (a frozen strategy, beside a live version), one already running or a stale revision,
    then what the runtime cannot serve — the publish's own check (`target_refusals`) and the
    runtime's declaration of shadow support. The live version itself is no refusal (the A/A
    test), and no approval is ever asked: a shadow changes nothing users see.
    `expected_revision`: the shadow revision the caller loaded (0: never started here)."""
    document = version.document
    refusals = []
    rights = shadow_refusal(actor, environment, document.agent)
    if rights is not None:
        refusals.append(rights)
    refusals += frozen_strategy_refusals(
        version,
        not_strategy="run as shadow; {key} is the agent's profile, which decides what the "
        "runtime fetches for every request.",
        what="a shadow runs",
    )
    live = live_release(document=document, environment=environment)
    if live is None:
        refusals.append(
            Finding(
                "environment",
                NOTHING_LIVE,
                f"Nothing of {document.key} is live in {environment.key}: a shadow runs beside "
                "the live version. Publish one first.",
            )
        )
    shadow = shadow_get(document=document, environment=environment)
    if not shadow_allows(shadow, "start"):
        refusals.append(
            Finding(
                "environment",
                SHADOW_RUNNING,
                f"{document.key} v{shadow.version.number} already runs as shadow in "
                f"{environment.key} (started by {shadow.started_by or 'someone'}): stop it "
                "first, one shadow at a time.",
            )
        )
    if expected_revision is not None and (shadow.revision if shadow else 0) != expected_revision:
        refusals.append(
            Finding("expected_revision", STALE_REVISION, "The shadow changed since you loaded it.")
        )
    return refusals + runtime_feature_refusals(
        version=version, environment=environment, actor=actor, live=live, feature=SHADOW
    )


def frozen_strategy_refusals(version, *, not_strategy: str, what: str) -> list[Finding]:
    """A shadow or a rollout takes a frozen strategy: a profile or a draft is refused."""
    document = version.document
    refusals = []
    if document.kind != Document.Kind.STRATEGY:
        refusals.append(
            Finding(
                "document",
                NOT_A_STRATEGY,
                "Only strategies " + not_strategy.format(key=document.key),
            )
        )
    if version.is_draft:
        refusals.append(
            Finding(
                "version",
                NOT_FROZEN,
                f"v{version.number} of {document.key} is a draft: freeze it first ({what} a "
                "version that cannot change under it).",
            )
        )
    return refusals


def runtime_feature_refusals(*, version, environment, actor, live, feature: str) -> list[Finding]:
    """What the runtime cannot serve of `version` (the publish's `target_refusals`), then its
    declaration of `feature` (shadow, split) missing from its manifest."""
    context = validation_context(environment=environment)
    refusals = target_refusals(
        actor=actor,
        agent=version.document.agent,
        environment=environment,
        kind=version.document.kind,
        body=version.body,
        live=live,
        context=context,
    )
    unsupported = runtime_feature_finding(environment=environment, feature=feature, context=context)
    return refusals + ([unsupported] if unsupported is not None else [])


@dataclass
class ShadowPreview:
    """What running `version` as shadow in `environment` would do, as the shadow page shows
    it: how it differs from live, and the shadow judgement split into what the runtime
    cannot serve (`blocking`) and the other refusals (`refusals`: who, what, the state)."""

    version: Version
    environment: Environment
    live: Release | None
    changes: list
    blocking: list[Finding]
    refusals: list[Finding]
    manifest_version: int | None
    flags: list[Finding] = field(default_factory=list)  # e.g. goes live unreviewed
    manifest: Manifest | None = None  # what the check ran against: who reported it, when

    @property
    def is_live(self) -> bool:
        """The A/A test: the shadow would run the live version itself."""
        return self.live is not None and self.live.version_id == self.version.pk


def shadow_preview(*, version: Version, environment: Environment, actor) -> ShadowPreview:
    return judged_preview(
        version=version,
        environment=environment,
        refusals=shadow_refusals(version=version, environment=environment, actor=actor),
    )


def judged_preview(*, version: Version, environment: Environment, refusals) -> ShadowPreview:
    """How `version` differs from live in `environment`, with a judgement's refusals split
    into the runtime's and the others (the shadow and rollout pages)."""
    refused = blocking(refusals)
    live = live_release(document=version.document, environment=environment)
    manifest_row = manifest_latest(environment=environment)
    return ShadowPreview(
        version=version,
        environment=environment,
        live=live,
        changes=diff_bodies(
            version.document.kind, live.version.body if live else None, version.body
        ),
        blocking=[f for f in refused if is_runtime_finding(f)],
        refusals=[f for f in refused if not is_runtime_finding(f)],
        manifest_version=manifest_row.version if manifest_row else None,
        manifest=manifest_row,
        flags=[f for f in refusals if f not in refused and f.code == UNREVIEWED],
    )


def frozen_versions(*, document) -> list[Version]:
    """The versions that can run as shadow, newest first."""
    return list(document.versions.filter(state=Version.State.FROZEN).order_by("-number"))

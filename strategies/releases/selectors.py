"""Reads for releases: the documents × environments grid, previews of what a publish or a
rollback would change, the publish judgement (what `release_publish` would refuse, asked
without writing), history, approvals and the dashboard. Views call these; they never build
querysets inline."""

from __future__ import annotations

from dataclasses import dataclass, field

from context_runtime.diff import diff_bodies
from context_runtime.findings import FLAG, Finding, blocking
from context_runtime.manifest import SHADOW, SPLIT
from django.core.paginator import Paginator
from django.db.models import F, Q, Sum

from console.kernel.policy import (
    Capability,
    publish_refusal,
    sensitive_refusals,
    shadow_refusal,
    user_can,
    user_can_decide_approval,
    user_can_publish_to,
    user_can_rollout,
    user_can_shadow,
)
from strategies.catalog.dependents import Reference
from strategies.catalog.models import Environment
from strategies.catalog.selectors import (
    ValidationContext,
    body_findings,
    environment_list,
    manifest_latest,
    runtime_feature_finding,
    sensitive_paths_added,
    sensitive_sections_on,
    validation_context,
)
from strategies.documents.models import Document, Version
from strategies.releases.models import (
    ApprovalRequest,
    Release,
    ReleaseEvent,
    Rollout,
    ShadowRelease,
)
from strategies.releases.plans import INVALID_PLAN, TEMPLATES, UNITS, plan_findings
from strategies.releases.preview_hook import preview_finding

HISTORY_PAGE_SIZE = 25


@dataclass
class Cell:
    """One document in one environment: what is live, what waits, what the user may do."""

    environment: Environment
    release: Release | None
    pending: ApprovalRequest | None
    can_publish: bool
    can_rollback: bool
    can_approve: bool
    # The environment before this one in promotion order, when what is live there differs
    # from here and the user may publish here: the row's "Promote from …" action.
    promote_from: Environment | None = None
    shadow: ShadowRelease | None = None  # the shadow running here, if any
    can_shadow: bool = False  # start, stop or promote a shadow (strategies, something live)
    rollout: Rollout | None = None  # the staged rollout active here, if any
    watch: Rollout | None = None  # the completed rollout in its paired watch here, if any
    can_watch_rollback: bool = False  # may roll back from the watch's warning (ROLLBACK)

    @property
    def live_number(self) -> int | None:
        return self.release.version.number if self.release else None

    @property
    def shadow_stop_fields(self) -> list[tuple[str, int]]:
        """What the stop dialog sends: the shadow revision the person saw."""
        return [("revision", self.shadow.revision)] if self.shadow else []

    @property
    def shadow_promote_fields(self) -> list[tuple[str, int]]:
        """What the promote dialog sends: the shadow version and release revision seen."""
        if self.shadow is None or self.release is None:
            return []
        return [("version", self.shadow.version.number), ("revision", self.release.revision)]


@dataclass
class DocumentRow:
    document: Document
    latest: Version | None  # newest version (draft or frozen)
    cells: list[Cell] = field(default_factory=list)


def release_grid(*, user, agent) -> list[DocumentRow]:
    """Documents (profile first) × environments in promotion order, in six queries."""
    envs = environment_list()
    docs = list(Document.objects.filter(agent=agent).order_by("kind", "key"))
    releases = {
        (r.document_id, r.environment_id): r
        for r in Release.objects.filter(document__agent=agent).select_related("version")
    }
    # Releases with something to roll back to: an earlier version that was live there
    # (rollback_targets non-empty), for all cells at once.
    rollback_ready = set(
        ReleaseEvent.objects.moves()
        .filter(release__document__agent=agent, unreviewed=False)
        .exclude(to_version_id=F("release__version_id"))
        .values_list("release_id", flat=True)
        .distinct()
    )
    pending = {
        (a.document_id, a.environment_id): a
        for a in ApprovalRequest.objects.filter(
            document__agent=agent, status=ApprovalRequest.Status.PENDING
        ).select_related("version", "requested_by", "document__agent")
    }
    latest: dict[int, Version] = {}
    for version in Version.objects.filter(document__in=docs).order_by("document", "-number"):
        latest.setdefault(version.document_id, version)
    shadows = {
        (s.document_id, s.environment_id): s
        for s in ShadowRelease.objects.filter(
            document__agent=agent, version__isnull=False
        ).select_related("version")
    }
    rollouts, watches = {}, {}
    for r in (
        Rollout.objects.filter(
            Q(state__in=Rollout.ACTIVE_STATES) | Q(pk__in=Rollout.objects.watching().values("pk"))
        )
        .filter(document__agent=agent)
        .select_related("version", "control_version", "document__agent", "environment")
    ):
        (rollouts if r.active else watches)[(r.document_id, r.environment_id)] = r
    may_publish = {env.pk: user_can_publish_to(user, env, agent) for env in envs}
    may_shadow = {env.pk: user_can_shadow(user, env, agent) for env in envs}
    may_rollback = user_can(user, Capability.ROLLBACK, agent)
    rows = []
    for doc in docs:
        row = DocumentRow(document=doc, latest=latest.get(doc.pk))
        for position, env in enumerate(envs):
            waiting = pending.get((doc.pk, env.pk))
            release = releases.get((doc.pk, env.pk))
            earlier = releases.get((doc.pk, envs[position - 1].pk)) if position else None
            row.cells.append(
                Cell(
                    environment=env,
                    release=release,
                    pending=waiting,
                    can_publish=may_publish[env.pk],
                    can_rollback=may_rollback
                    and release is not None
                    and release.pk in rollback_ready,
                    can_approve=bool(waiting and user_can_decide_approval(user, waiting)),
                    promote_from=envs[position - 1]
                    if earlier is not None
                    and may_publish[env.pk]
                    and waiting is None
                    and (release is None or release.version_id != earlier.version_id)
                    else None,
                    shadow=shadows.get((doc.pk, env.pk)),
                    can_shadow=may_shadow[env.pk]
                    and release is not None
                    and doc.kind == Document.Kind.STRATEGY,
                    rollout=rollouts.get((doc.pk, env.pk)),
                    watch=watches.get((doc.pk, env.pk)),
                    can_watch_rollback=may_rollback,
                )
            )
        rows.append(row)
    return rows


def release_cell(*, user, document: Document, environment: Environment) -> Cell:
    """One cell of the grid (what is live, its shadow, what waits, what the user may do), as
    the grid shows it."""
    for row in release_grid(user=user, agent=document.agent):
        if row.document.pk == document.pk:
            for cell in row.cells:
                if cell.environment.pk == environment.pk:
                    return cell
    # An archived environment is no column of the grid: nothing may start there.
    return Cell(
        environment=environment,
        release=live_release(document=document, environment=environment),
        pending=None,
        can_publish=False,
        can_rollback=False,
        can_approve=False,
        shadow=running_shadow(document=document, environment=environment),
    )


def promotion_pairs(*, user, agent) -> list[tuple[Environment, Environment]]:
    """(source, target) for each step of the promotion order (sg-test → bank-uat → prod)
    where the user may publish to the target: the agent's "Promote …" actions."""
    envs = environment_list()
    return [
        (source, target)
        for source, target in zip(envs, envs[1:], strict=False)
        if user_can_publish_to(user, target, agent)
    ]


@dataclass
class PromotionRow:
    """One document of a promotion preview: what the source serves, what the target serves."""

    document: Document
    source_release: Release | None
    target_release: Release | None
    pending: ApprovalRequest | None  # a request already waiting in the target
    preview: ChangePreview | None  # set when the document would change

    @property
    def changes(self) -> bool:
        return self.preview is not None


def promotion_preview(*, agent, source: Environment, target: Environment, documents=None):
    """What "publish to `target` what is live in `source`" would do, per document (all of
    the agent's when `documents` is None): the plain-English diff and the checks against the
    target runtime for each one that would change."""
    if documents is None:
        documents = list(Document.objects.filter(agent=agent).order_by("kind", "key"))
    live = {
        (r.document_id, r.environment_id): r
        for r in Release.objects.filter(
            document__in=documents, environment__in=[source, target]
        ).select_related("version", "environment", "document__agent")
    }
    waiting = {
        a.document_id: a
        for a in ApprovalRequest.objects.filter(
            document__in=documents, environment=target, status=ApprovalRequest.Status.PENDING
        ).select_related("version", "requested_by")
    }
    rows = []
    for document in documents:
        have = live.get((document.pk, target.pk))
        want = live.get((document.pk, source.pk))
        changes = want is not None and (have is None or have.version_id != want.version_id)
        rows.append(
            PromotionRow(
                document=document,
                source_release=want,
                target_release=have,
                pending=waiting.get(document.pk),
                preview=change_preview(version=want.version, environment=target)
                if changes
                else None,
            )
        )
    return rows


def pending_for(*, document, environment) -> ApprovalRequest | None:
    """The request waiting for document × environment (at most one), if any."""
    return (
        ApprovalRequest.objects.select_related("version", "requested_by", "document__agent")
        .filter(document=document, environment=environment, status=ApprovalRequest.Status.PENDING)
        .first()
    )


def live_by_document(*, agent, environment: Environment) -> dict[str, Release]:
    """{document key: its release} of `agent` in `environment` (with the live version)."""
    releases = Release.objects.filter(environment=environment, document__agent=agent)
    return {r.document.key: r for r in releases.select_related("document", "version").order_by()}


def pending_by_document(*, agent, environment: Environment) -> dict[str, ApprovalRequest]:
    """{document key: the request waiting for it} of `agent` in `environment`."""
    approvals = ApprovalRequest.objects.filter(
        environment=environment, document__agent=agent, status=ApprovalRequest.Status.PENDING
    ).select_related("document", "version", "requested_by")
    return {a.document.key: a for a in approvals}


def live_numbers(*, agent) -> dict[str, dict[str, int]]:
    """{environment key: {document key: live version number}} of `agent`, in one query."""
    live: dict[str, dict[str, int]] = {}
    releases = Release.objects.filter(document__agent=agent).select_related(
        "environment", "document", "version"
    )
    for release in releases:
        live.setdefault(release.environment.key, {})[release.document.key] = release.version.number
    return live


def target_findings(*, version: Version, environment: Environment) -> list[Finding]:
    """Every finding for `version` against what `environment`'s runtime implements now."""
    return body_findings(kind=version.document.kind, body=version.body, environment=environment)


# --- the publish judgement ----------------------------------------------------------------------
# What `release_publish` would refuse, asked without writing: the publish raises from it, the
# import's plan (strategies.exchange) shows it. Its own findings carry these codes; every other
# finding is the target runtime's (`target_findings`: its manifest, an archived environment, a
# runtime that has not reported yet).
NOT_FOUND = "not_found"  # the agent is out of the user's scope
NOT_ALLOWED = "forbidden"  # the user may not publish to this environment
ALREADY_LIVE = "already_live"
STALE_REVISION = "stale_revision"
SENSITIVE_SECTION = "sensitive_section"  # switched on without the permission
APPROVAL_PENDING = "approval_pending"  # a request already waits here (protected environment)
APPROVAL_REQUIRED = "approval_required"  # protected: a request instead (a flag, not a refusal)
REPLACES_REQUEST = "replaces_request"  # the actor's own waiting publish request gives way (a flag)
UNREVIEWED = "unreviewed"  # break-glass: goes live without the usual approval (a flag)
PREVIEW_REQUIRED = "preview_required"  # the environment requires a recent impact preview
PREVIEW_FEW_TRACES = "preview_few_traces"  # the preview covered few traces (a flag: give a reason)
# A shadow's own (`shadow_refusals`); the runtime's refusals are the publish's, plus the
# runtime's declaration of shadow support (`shadow_unsupported`).
NOT_A_STRATEGY = "not_a_strategy"
NOT_FROZEN = "not_frozen"
NOTHING_LIVE = "nothing_live"
SHADOW_RUNNING = "shadow_running"
# A staged rollout's own (`rollout_refusals`); the runtime's are the publish's, plus its
# declaration of split support (`split_unsupported`).
ROLLOUT_ACTIVE = "rollout_active"
INVALID_UNIT = "invalid_unit"
JUDGEMENT_CODES = frozenset(
    {
        ROLLOUT_ACTIVE,
        INVALID_PLAN,
        INVALID_UNIT,
        NOT_A_STRATEGY,
        NOT_FROZEN,
        NOTHING_LIVE,
        SHADOW_RUNNING,
        PREVIEW_REQUIRED,
        PREVIEW_FEW_TRACES,
        NOT_FOUND,
        NOT_ALLOWED,
        ALREADY_LIVE,
        STALE_REVISION,
        SENSITIVE_SECTION,
        APPROVAL_PENDING,
        APPROVAL_REQUIRED,
        REPLACES_REQUEST,
        UNREVIEWED,
    }
)


def is_runtime_finding(finding: Finding) -> bool:
    """A finding of the target runtime (`target_findings`), not one of the judgement's own."""
    return finding.code not in JUDGEMENT_CODES


def request_kind_word(kind: str) -> str:
    return "rollback" if kind == ApprovalRequest.Kind.ROLLBACK else "publish"


def replaced_by_new_request(pending: ApprovalRequest | None, actor, number: int | None) -> bool:
    """A new publish request replaces the one waiting when that one is the same person's own
    publish request for another version (they asked for v3, now they ask for v4): it is
    withdrawn, not a dead end. Someone else's request, a rollback, or the same version asked
    again still waits."""
    return (
        pending is not None
        and pending.kind == ApprovalRequest.Kind.PUBLISH
        and pending.requested_by_id is not None
        and pending.requested_by_id == getattr(actor, "pk", None)
        and pending.version.number != number
    )


def waiting_finding(*, pending: ApprovalRequest | None, document_key: str, environment) -> Finding:
    """A request already waits for this document × environment (at most one may)."""
    what = request_kind_word(pending.kind) if pending else "request"
    whose = (
        f" (v{pending.version.number}, requested by {pending.requested_by})." if pending else "."
    )
    return Finding(
        "",
        APPROVAL_PENDING,
        f"A {what} of {document_key} in {environment.key} already waits for approval{whose}",
    )


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
    environment."""
    refusals = []
    rights = publish_refusal(actor, environment, agent)
    if rights is not None:
        refusals.append(rights)
    if live is not None and number is not None and live.version.number == number:
        refusals.append(
            Finding(
                "version",
                ALREADY_LIVE,
                f"{document_key} v{number} is already live in {environment.key}.",
            )
        )
    if expected_revision is not None and (live.revision if live else 0) != expected_revision:
        refusals.append(
            Finding("expected_revision", STALE_REVISION, "The release changed since you loaded it.")
        )
    refusals += target_refusals(
        actor=actor,
        agent=agent,
        environment=environment,
        kind=kind,
        body=body,
        live=live,
        context=context,
    )
    if environment.require_preview and kind == Document.Kind.STRATEGY:
        finding = preview_finding(
            agent=agent, environment=environment, document_key=document_key, body=body, actor=actor
        )
        if finding is not None:
            refusals.append(finding)
    if environment.protected:
        if replaced_by_new_request(pending, actor, number):
            refusals.append(
                Finding(
                    "environment",
                    REPLACES_REQUEST,
                    f"Your waiting request for {document_key} v{pending.version.number} in "
                    f"{environment.key} is withdrawn and replaced by this one.",
                    severity=FLAG,
                )
            )
        elif pending is not None:
            refusals.append(
                waiting_finding(pending=pending, document_key=document_key, environment=environment)
            )
        refusals.append(
            Finding(
                "environment",
                APPROVAL_REQUIRED,
                f"{environment.key} is protected: an approval request is created.",
                severity=FLAG,
            )
        )
    elif environment.relaxed_by_break_glass("protected"):
        refusals.append(unreviewed_finding(environment))
    return refusals


def unreviewed_finding(environment: Environment) -> Finding:
    """The flag of a publish that goes live unreviewed: a break-glass switched approvals off."""
    return Finding(
        "environment",
        UNREVIEWED,
        f"{environment.key} is in break-glass (approvals switched off by "
        f"{environment.break_glass_by}: {environment.break_glass_reason}): this goes live "
        "unreviewed, is marked so and is never offered as a rollback target.",
        severity=FLAG,
    )


def target_refusals(
    *, actor, agent, environment, kind: str, body, live: Release | None, context=None
) -> list[Finding]:
    """What stops this content going live in `environment` whoever asks and whatever waits:
    the target runtime's blocking findings, then the sensitive sections it switches on (against
    what is live there) that `actor` may not enable. An approval checks these again."""
    added = sensitive_paths_added(body, baseline=[live.version.body] if live else [])
    return runtime_refusals(
        kind=kind, body=body, environment=environment, context=context
    ) + sensitive_refusals(actor, agent, added)


def runtime_refusals(*, kind: str, body, environment, context=None) -> list[Finding]:
    """The target runtime's blocking findings for a body (its manifest, an archived
    environment, a runtime that has not reported yet): the part of the judgement that asks
    nobody's rights."""
    return blocking(body_findings(kind=kind, body=body, environment=environment, context=context))


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
    if shadow is not None and shadow.running:
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
    )


def frozen_versions(*, document) -> list[Version]:
    """The versions that can run as shadow, newest first."""
    return list(document.versions.filter(state=Version.State.FROZEN).order_by("-number"))


def rollback_targets(release: Release) -> list[Version]:
    """Versions that were live in this environment before, newest first, except the live one
    and those that only ever went live there unreviewed (`unreviewed_versions`)."""
    ids = (
        ReleaseEvent.objects.moves()
        .filter(release=release, unreviewed=False)
        .values_list("to_version_id", flat=True)
    )
    return list(
        Version.objects.filter(pk__in=ids).exclude(pk=release.version_id).order_by("-number")
    )


def unreviewed_versions(release: Release) -> list[Version]:
    """Versions that went live in this environment only without the approval it normally
    requires (during a break-glass), newest first: never rollback targets."""
    events = ReleaseEvent.objects.moves().filter(release=release)
    reviewed = events.filter(unreviewed=False).values_list("to_version_id", flat=True)
    ids = events.filter(unreviewed=True).values_list("to_version_id", flat=True)
    return list(
        Version.objects.filter(pk__in=ids)
        .exclude(pk__in=reviewed)
        .exclude(pk=release.version_id)
        .order_by("-number")
    )


def live_release(*, document, environment) -> Release | None:
    return (
        Release.objects.select_related("version", "document__agent", "environment")
        .filter(document=document, environment=environment)
        .first()
    )


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
        live_in=live_in,
        skipped=[
            e.key
            for e in environment_list()
            if e.position < environment.position and e.key not in live_in
        ],
    )


def rollback_choices(*, release: Release) -> list[Version]:
    return rollback_targets(release)


def unreviewed_releases(*, version: Version) -> list[ReleaseEvent]:
    """The times `version` went live unreviewed (break-glass), newest first: its page says so."""
    return list(
        ReleaseEvent.objects.moves()
        .filter(to_version=version, unreviewed=True)
        .select_related("release__environment")
        .order_by("-occurred_at", "-id")
    )


def history_events(*, agent, document_key: str = "", environment_key: str = ""):
    """Release events of an agent, newest first, filtered (the history page and the API)."""
    events = ReleaseEvent.objects.filter(release__document__agent=agent).select_related(
        "release__document", "release__environment", "from_version", "to_version"
    )
    if document_key:
        events = events.filter(release__document__key=document_key)
    if environment_key:
        events = events.filter(release__environment__key=environment_key)
    return events.order_by("-occurred_at", "-id")


def history_page(*, agent, document_key: str = "", environment_key: str = "", page=1):
    """Release events of an agent, newest first, filtered from the URL."""
    events = history_events(agent=agent, document_key=document_key, environment_key=environment_key)
    return Paginator(events, HISTORY_PAGE_SIZE).get_page(page)


def pending_approvals(*, agents) -> list[ApprovalRequest]:
    return list(
        ApprovalRequest.objects.filter(
            document__agent__in=agents, status=ApprovalRequest.Status.PENDING
        )
        .select_related("document__agent", "environment", "version", "requested_by")
        .order_by("-requested_at")
    )


def approval_get(*, agent, pk: int) -> ApprovalRequest | None:
    return (
        ApprovalRequest.objects.select_related(
            "document__agent", "environment", "version", "requested_by", "decided_by"
        )
        .filter(pk=pk, document__agent=agent)
        .first()
    )


# --- dashboard ------------------------------------------------------------------------------------
def dashboard_context(*, user, agents) -> dict:
    """For each agent card: live versions per document × environment and pending approvals.
    The template matches `release_cards[i].agent_id` to the card's agent."""
    envs = environment_list()
    agent_ids = [a.pk for a in agents]
    releases = Release.objects.filter(document__agent_id__in=agent_ids).select_related(
        "document", "version"
    )
    live: dict[tuple[int, int], int] = {
        (r.document_id, r.environment_id): r.version.number for r in releases
    }
    pending = pending_approvals(agents=agents)
    warned = watch_warnings(agents=agents)
    may_rollback = {a.pk: user_can(user, Capability.ROLLBACK, a) for a in agents}
    # Health: live releases the environment's runtime no longer supports (its latest manifest).

    warnings = [
        dict(finding, environment=env.key)
        for env in envs
        for finding in live_findings(environment=env, agents=agents)
    ]
    docs_by_agent: dict[int, list[Document]] = {}
    for doc in Document.objects.filter(agent_id__in=agent_ids).order_by("kind", "key"):
        docs_by_agent.setdefault(doc.agent_id, []).append(doc)
    cards = []
    for agent in agents:
        rows = [
            {"document": doc, "live": [live.get((doc.pk, env.pk)) for env in envs]}
            for doc in docs_by_agent.get(agent.pk, [])
        ]
        cards.append(
            {
                "agent_id": agent.pk,
                "rows": rows,
                "pending": [p for p in pending if p.document.agent_id == agent.pk],
                "warnings": [w for w in warnings if w["agent"] == agent.key],
                "watch_warnings": [r for r in warned if r.document.agent_id == agent.pk],
                "can_watch_rollback": may_rollback[agent.pk],
            }
        )
    return {"release_cards": cards, "release_environments": envs}


# --- tokens and webhooks ------------------------------------------------------------------------------
def live_findings(*, environment: Environment, agents=None) -> list[dict]:
    """Live releases in `environment` that its latest manifest no longer supports, in the
    shape of docs/runtime-contract.md §2's `warnings`: [{agent, document, version, errors}]. For the
    runtime's manifest report and for health warnings."""
    context = validation_context(environment=environment)
    if context.manifest is None:
        return []
    releases = Release.objects.filter(environment=environment).select_related(
        "document__agent", "version"
    )
    if agents is not None:
        releases = releases.filter(document__agent__in=agents)
    warnings = []
    for release in releases.order_by("document__agent__key", "document__key"):
        errors = blocking(
            body_findings(kind=release.document.kind, body=release.version.body, context=context)
        )
        if errors:
            warnings.append(
                {
                    "agent": release.document.agent.key,
                    "document": release.document.key,
                    "version": release.version.number,
                    "errors": [e.as_dict() for e in errors],
                }
            )
    return warnings


# --- the operator API's approval lists -------------------------------------------------------
def approval_list(*, agents, status: str = "", agent_key: str = "", environment_key: str = ""):
    """Approval requests on `agents` (the caller's scope), newest first, filtered."""
    approvals = ApprovalRequest.objects.filter(document__agent__in=agents).select_related(
        "document__agent", "environment", "version", "requested_by", "decided_by"
    )
    if status:
        approvals = approvals.filter(status=status)
    if agent_key:
        approvals = approvals.filter(document__agent__key=agent_key)
    if environment_key:
        approvals = approvals.filter(environment__key=environment_key)
    return approvals.order_by("-requested_at", "-id")


def approval_in_scope(*, agents, pk: int) -> ApprovalRequest | None:
    """The request with this id when its agent is among `agents`; else None (404)."""
    return approval_list(agents=agents).filter(pk=pk).first()


# --- what other jobs ask of releases ---------------------------------------------------------
def shadows_in(*, agent, environment) -> list[ShadowRelease]:
    """Every shadow row of `agent` in `environment`, stopped ones too (their revisions count
    in the config ETag), with documents and versions: what the payload's `shadow` renders."""
    return list(
        ShadowRelease.objects.filter(document__agent=agent, environment=environment)
        .select_related("document", "version")
        .order_by("document__key")
    )


def live_releases(*, agent, environment) -> list[Release]:
    """The releases of `agent` in `environment`, with their documents and versions, by
    document key: what its runtime's config payload renders (delivery.config)."""
    return list(
        Release.objects.filter(document__agent=agent, environment=environment)
        .select_related("document", "version")
        .order_by("document__key")
    )


def references_to_agent(agent) -> list[Reference]:
    """Releases and approval requests refer to their agent (its delete is refused)."""
    references = []
    if Release.objects.filter(document__agent=agent).exists():
        references.append(
            Reference("has_releases", "it has releases: documents live in an environment")
        )
    if ApprovalRequest.objects.filter(document__agent=agent).exists():
        references.append(Reference("has_approval_requests", "it has approval requests"))
    return references


def references_to_environment(environment) -> list[Reference]:
    """Releases and approval requests refer to their environment (its delete is refused)."""
    references = []
    if Release.objects.filter(environment=environment).exists():
        references.append(Reference("has_releases", "documents are live in it"))
    if ApprovalRequest.objects.filter(environment=environment).exists():
        references.append(Reference("has_approval_requests", "it has approval requests"))
    return references


# --- staged rollouts (issue 23) ------------------------------------------------------------------
def active_rollout(*, document, environment) -> Rollout | None:
    """The rollout active (waiting for approval, running or paused) here, if any."""
    return (
        Rollout.objects.active()
        .select_related("document__agent", "environment", "version", "control_version")
        .filter(document=document, environment=environment)
        .first()
    )


def rollout_get(*, agent, key: str) -> Rollout | None:
    return (
        Rollout.objects.select_related(
            "document__agent", "environment", "version", "control_version"
        )
        .filter(document__agent=agent, key=key)
        .first()
    )


def rollout_list(*, agent, state: str = "", document_key: str = "", environment_key: str = ""):
    """The rollouts of an agent, newest first, filtered (the API's list and the pages)."""
    rollouts = Rollout.objects.filter(document__agent=agent).select_related(
        "document__agent", "environment", "version", "control_version"
    )
    if state:
        rollouts = rollouts.filter(state=state)
    if document_key:
        rollouts = rollouts.filter(document__key=document_key)
    if environment_key:
        rollouts = rollouts.filter(environment__key=environment_key)
    return rollouts.order_by("-started_at", "-id")


def rollouts_running() -> list[Rollout]:
    """Every running rollout, oldest first: what the evaluator looks at every 30 s."""
    return list(
        Rollout.objects.filter(state=Rollout.State.RUNNING)
        .select_related("document__agent", "environment", "version", "control_version")
        .order_by("started_at", "id")
    )


def rollouts_in(*, agent, environment) -> tuple[list[Rollout], list[Rollout], int]:
    """(the rollouts the runtime applies — running or paused —, the completed ones in their
    paired watch, with their documents and versions, the sum of the revisions of every
    rollout ever here): what the config payload renders and how its ETag's revision counts
    them."""
    rows = Rollout.objects.filter(document__agent=agent, environment=environment)
    applied = list(  # one query for both
        rows.filter(Q(state__in=Rollout.SERVED_STATES) | Q(pk__in=rows.watching().values("pk")))
        .select_related("document", "version", "control_version")
        .order_by("document__key")
    )
    served = [r for r in applied if r.state in Rollout.SERVED_STATES]
    watching = [r for r in applied if r.watching]
    return served, watching, rows.aggregate(total=Sum("revision"))["total"] or 0


def rollouts_watching() -> list[Rollout]:
    """Every rollout in its paired watch, oldest first: what the evaluator looks at."""
    return list(
        Rollout.objects.watching()
        .select_related("document__agent", "environment", "version", "control_version")
        .order_by("ended_at", "id")
    )


def watch_warnings(*, agents=None, document=None, environment=None) -> list[Rollout]:
    """The watches that warned and still run (the release rows and the dashboard show them,
    with their one-click rollback)."""
    rows = Rollout.objects.watching().exclude(watch_warning={})
    if agents is not None:
        rows = rows.filter(document__agent__in=agents)
    if document is not None:
        rows = rows.filter(document=document)
    if environment is not None:
        rows = rows.filter(environment=environment)
    return list(
        rows.select_related(
            "document__agent", "environment", "version", "control_version"
        ).order_by("-ended_at", "-id")
    )


def rollout_refusals(
    *, version: Version, environment: Environment, actor, plan, unit: str
) -> list[Finding]:
    """Everything `rollout_start` would say to rolling `version` out in `environment`,
    nothing written, in the order it raises them: who may (as a publish there), what a
    rollout is (a frozen strategy replacing a live version), one already active or a request
    already waiting, the plan and unit, then what the runtime cannot serve — the publish's
    check (`target_refusals`) and the runtime's declaration of split support. In a protected
    environment the flag that the plan asks a second person first (`approval_required`)."""
    document = version.document
    refusals = []
    rights = publish_refusal(actor, environment, document.agent)
    if rights is not None:
        refusals.append(rights)
    refusals += frozen_strategy_refusals(
        version,
        not_strategy="roll out in steps; {key} is the agent's profile: publish it.",
        what="a rollout serves",
    )
    live = live_release(document=document, environment=environment)
    if live is None:
        refusals.append(
            Finding(
                "environment",
                NOTHING_LIVE,
                f"Nothing of {document.key} is live in {environment.key}: a rollout replaces "
                "the live version step by step. Publish one first.",
            )
        )
    elif live.version_id == version.pk:
        refusals.append(
            Finding(
                "version",
                ALREADY_LIVE,
                f"{document.key} v{version.number} is already live in {environment.key}.",
            )
        )
    active = active_rollout(document=document, environment=environment)
    if active is not None:
        refusals.append(
            Finding(
                "environment",
                ROLLOUT_ACTIVE,
                f"{active.key} (v{active.version.number}) is already "
                f"{active.get_state_display().lower()} for {document.key} in {environment.key}: "
                "one rollout at a time. Finish or stop it first.",
            )
        )
    pending = pending_for(document=document, environment=environment)
    if pending is not None and active is None:
        refusals.append(
            waiting_finding(pending=pending, document_key=document.key, environment=environment)
        )
    if isinstance(plan, str):
        if plan not in TEMPLATES:
            refusals.append(
                Finding(
                    "plan",
                    INVALID_PLAN,
                    f"Unknown plan {plan!r}: {', '.join(TEMPLATES)}, or a list of steps.",
                )
            )
    else:
        refusals += plan_findings(plan)
    if unit not in UNITS:
        refusals.append(
            Finding("unit", INVALID_UNIT, f"A unit is one of {', '.join(UNITS)}, not {unit!r}.")
        )
    refusals += runtime_feature_refusals(
        version=version, environment=environment, actor=actor, live=live, feature=SPLIT
    )
    if environment.protected:
        refusals.append(
            Finding(
                "environment",
                APPROVAL_REQUIRED,
                f"{environment.key} is protected: the whole plan waits for a second person's "
                "approval, once.",
                severity=FLAG,
            )
        )
    return refusals


def rollout_runtime_refusals(rollout: Rollout) -> list[Finding]:
    """What the environment's runtime, as it reports itself now, cannot serve of the rolled-out
    version: its blocking findings, and `split` no longer declared. Asked again before every
    move to a larger share (a runtime redeployed mid-rollout may have lost either)."""
    environment = rollout.environment
    context = validation_context(environment=environment)
    refusals = runtime_refusals(
        kind=rollout.document.kind,
        body=rollout.version.body,
        environment=environment,
        context=context,
    )
    unsupported = runtime_feature_finding(environment=environment, feature=SPLIT, context=context)
    return blocking(refusals + ([unsupported] if unsupported is not None else []))


def rollout_preview(*, version: Version, environment: Environment, actor, plan, unit="task"):
    """What rolling `version` out in `environment` would do, as the start page shows it."""
    return judged_preview(
        version=version,
        environment=environment,
        refusals=rollout_refusals(
            version=version, environment=environment, actor=actor, plan=plan, unit=unit
        ),
    )


REQUEST_IDS_KEPT = 5


def evidence_request_ids(facts) -> list[str]:
    """The request ids a guard's facts name — its own `request_ids`, then those of the kinds
    it breached, then any — at most five: one click from the rollout page to the trace."""
    facts = facts or {}
    kinds = facts.get("kinds") or {}
    ordered = [facts, *(kinds[k] for k in facts.get("breached") or () if k in kinds)]
    ordered += [entry for entry in kinds.values() if isinstance(entry, dict)]
    found: list[str] = []
    for entry in ordered:
        for request_id in entry.get("request_ids") or ():
            if request_id not in found:
                found.append(request_id)
    return found[:REQUEST_IDS_KEPT]


def rollout_actions(*, user, rollout: Rollout) -> dict[str, bool]:
    """Which actions `user` may take on `rollout` now (the page's buttons): the state allows
    it and the policy does."""
    state = rollout.state
    allowed = {
        "pause": state == Rollout.State.RUNNING,
        "resume": state == Rollout.State.PAUSED,
        "advance": state in Rollout.SERVED_STATES,
        "finish": state in Rollout.SERVED_STATES,
        "stop": state in Rollout.ACTIVE_STATES,
    }
    return {
        action: ok and user_can_rollout(user, rollout.environment, rollout.document.agent, action)
        for action, ok in allowed.items()
    }

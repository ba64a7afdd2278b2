"""Reads for releases: the documents × environments grid, previews of what a publish or a
rollback would change, history, tokens and webhooks. Views call these; they never build
querysets inline."""

from __future__ import annotations

from dataclasses import dataclass, field

from context_runtime.diff import diff_bodies
from context_runtime.findings import Finding, blocking
from django.core.paginator import Paginator
from django.db.models import F

from console.kernel.policy import (
    Capability,
    user_can,
    user_can_decide_approval,
    user_can_publish_to,
)
from strategies.catalog.dependents import Reference
from strategies.catalog.models import Environment
from strategies.catalog.selectors import (
    body_findings,
    environment_list,
    manifest_latest,
    sensitive_sections_on,
    validation_context,
)
from strategies.documents.models import Document, Version
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent

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

    @property
    def live_number(self) -> int | None:
        return self.release.version.number if self.release else None


@dataclass
class DocumentRow:
    document: Document
    latest: Version | None  # newest version (draft or frozen)
    cells: list[Cell] = field(default_factory=list)


def release_grid(*, user, agent) -> list[DocumentRow]:
    """Documents (profile first) × environments in promotion order, in five queries."""
    envs = environment_list()
    docs = list(Document.objects.filter(agent=agent).order_by("kind", "key"))
    releases = {
        (r.document_id, r.environment_id): r
        for r in Release.objects.filter(document__agent=agent).select_related("version")
    }
    # Releases with something to roll back to: an earlier version that was live there
    # (rollback_targets non-empty), for all cells at once.
    rollback_ready = set(
        ReleaseEvent.objects.filter(release__document__agent=agent)
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
    may_publish = {env.pk: user_can_publish_to(user, env, agent) for env in envs}
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
                )
            )
        rows.append(row)
    return rows


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


def target_findings(*, version: Version, environment: Environment) -> list[Finding]:
    """Every finding for `version` against what `environment`'s runtime implements now."""
    return body_findings(kind=version.document.kind, body=version.body, environment=environment)


def rollback_targets(release: Release) -> list[Version]:
    """Versions that were live in this environment before, newest first, except the live one."""
    ids = ReleaseEvent.objects.filter(release=release).values_list("to_version_id", flat=True)
    return list(
        Version.objects.filter(pk__in=ids).exclude(pk=release.version_id).order_by("-number")
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

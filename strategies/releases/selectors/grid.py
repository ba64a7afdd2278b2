"""The release grid (documents × environments: what is live, what waits, what the user may
do in each cell), the dashboard's cards, the live releases a runtime's manifest no longer
supports, and what other jobs ask of releases."""

from __future__ import annotations

from dataclasses import dataclass, field

from context_runtime.findings import blocking
from django.db.models import F, Q

from console.kernel.policy import (
    Capability,
    user_can,
    user_can_decide_approval,
    user_can_publish_to,
    user_can_shadow,
)
from strategies.catalog.dependents import Reference
from strategies.catalog.models import Environment
from strategies.catalog.selectors import (
    ARCHIVED,
    body_findings,
    environment_list,
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
from strategies.releases.selectors.approvals import pending_approvals
from strategies.releases.selectors.publish import live_release
from strategies.releases.selectors.rollouts import watch_warnings
from strategies.releases.selectors.shadow import running_shadow


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
def live_findings(*, environment: Environment, agents=None, candidate=None) -> list[dict]:
    """Live releases in `environment` that its latest manifest no longer supports (or
    `candidate`, a manifest reported but not stored yet, would not), in the shape of
    docs/runtime-contract.md §2's `warnings`: [{agent, document, version, errors}]. For the
    runtime's manifest report (which refuses a candidate with any) and for health warnings."""
    context = validation_context(environment=environment, candidate=candidate)
    if context.manifest is None:
        return []
    releases = Release.objects.filter(environment=environment).select_related(
        "document__agent", "version"
    )
    if agents is not None:
        releases = releases.filter(document__agent__in=agents)
    warnings = []
    for release in releases.order_by("document__agent__key", "document__key"):
        # What the runtime lacks only: an archived environment stops new publishes, not what
        # is live there (nor its runtime's reports).
        errors = [
            finding
            for finding in blocking(
                body_findings(
                    kind=release.document.kind, body=release.version.body, context=context
                )
            )
            if finding.code != ARCHIVED
        ]
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

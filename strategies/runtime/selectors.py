"""Reads of runtime tokens and of the runtimes that report what they serve."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from context_runtime.findings import Finding
from django.core.paginator import Page, Paginator
from django.db.models import Case, Count, F, Q, Value, When, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from console.kernel.audit import AccessAction
from console.kernel.errors import ValidationFailed
from console.kernel.models import AccessLogEntry
from strategies.catalog.dependents import Reference, agent_has_traces
from strategies.catalog.models import Agent, Environment, Manifest
from strategies.catalog.selectors import environment_list, latest_manifests
from strategies.delivery.models import ConfigPayload
from strategies.documents.models import Document, Version
from strategies.runtime.auth import last_used_pending, refused_pending
from strategies.runtime.instances import (
    GONE_AFTER_SECONDS,
    LAGGING_AFTER_SECONDS,
    LISTED_FOR_HOURS,
    STOPPED,
    sdk_supported,
)
from strategies.runtime.models import RuntimeInstance, RuntimeToken


def tokens_list() -> list[RuntimeToken]:
    """Every token, active first; last use includes what Redis noted but not yet flushed."""

    pending = last_used_pending()
    tokens = list(
        RuntimeToken.objects.select_related("environment")
        .prefetch_related("agents")
        .order_by("revoked_at", "-created_at")
    )
    for token in tokens:
        noted = pending.get(token.pk)
        if noted:
            noted_at = datetime.fromisoformat(noted)
            if token.last_used_at is None or noted_at > token.last_used_at:
                token.last_used_at = noted_at
    return tokens


def agents_named(keys) -> list[Agent]:
    """The agents of these keys, in key order; 400 naming any that does not exist (deleted
    since the form was shown): never fewer agents than asked for, which could read as none."""
    keys = sorted(set(keys))
    agents = list(Agent.objects.filter(key__in=keys).order_by("key"))
    unknown = sorted(set(keys) - {a.key for a in agents})
    if unknown:
        raise ValidationFailed(
            "Unknown agent " + ", ".join(unknown) + ".",
            details=[Finding("agents", "unknown_agent", f"Unknown agent {k}.") for k in unknown],
        )
    return agents


def references_to_agent(agent) -> list[Reference]:
    """Active runtime tokens naming the agent refuse its delete (named, to revoke first):
    without it they would cover no agent, and revoking is for a person to decide."""
    names = list(
        RuntimeToken.objects.filter(agents=agent, revoked_at__isnull=True)
        .order_by("name")
        .values_list("name", flat=True)
    )
    if not names:
        return []
    return [
        Reference(
            "has_runtime_tokens",
            "runtime tokens are scoped to it ("
            + ", ".join(f"“{name}”" for name in names)
            + "): revoke them first",
        )
    ]


def references_to_environment(environment) -> list[Reference]:
    """Runtime tokens, revoked ones too, refer to their environment (its delete is refused)."""
    if RuntimeToken.objects.filter(environment=environment).exists():
        return [
            Reference(
                "has_runtime_tokens",
                "it has runtime tokens (revoked ones too: they are its history)",
            )
        ]
    return []


# --------------------------------------------------------------------------- a new agent's next steps (documents, manifests, traces: what connecting a runtime still needs)
@dataclass
class Onboarding:
    """What a new agent still lacks, in the order a team does it: a strategy (or a profile
    version), a runtime that reported its manifest in each environment, a first trace."""

    agent: Agent
    has_documents: bool
    environments_without_manifest: list[Environment] = field(default_factory=list)
    environments: list[Environment] = field(default_factory=list)
    has_traces: bool = False

    @property
    def done(self) -> bool:
        return self.has_documents and not self.environments_without_manifest and self.has_traces


def agent_onboarding(*, agent: Agent) -> Onboarding:
    """Four small queries (the agent's versions and strategies, the latest manifests, one
    trace of the agent's through its index)."""
    environments = environment_list()
    reported = latest_manifests()
    return Onboarding(
        agent=agent,
        has_documents=Version.objects.filter(document__agent=agent).exists()
        or Document.objects.filter(agent=agent, kind=Document.Kind.STRATEGY).exists(),
        environments_without_manifest=[e for e in environments if e.pk not in reported],
        environments=environments,
        has_traces=agent_has_traces(agent),
    )


# --------------------------------------------------------------------------- who serves what
UNAUTHORIZED = "unauthorized"  # the SDK's resolution of a copy the console refuses to confirm
CARD_ROWS = 20  # runtimes listed per environment on the card; the runtimes page pages the rest
PAGE_ROWS = 100  # per page of one environment's runtimes
# A runtime that stopped cleanly stays listed this long (the operator sees it go), then is only
# counted in "N stopped today".
STOPPED_LISTED_SECONDS = 600


@dataclass
class RuntimeRow:
    """One runtime process serving the agent in an environment, judged against what is live."""

    instance: RuntimeInstance
    current: bool  # serves the live configuration now (a stopped or gone runtime serves nothing)
    lagging: bool  # still on another one LAGGING_AFTER_SECONDS after the change
    gone: bool  # said it stopped, or unheard for GONE_AFTER_SECONDS
    sdk_supported: bool | None
    token_revoked: bool

    @property
    def resolution(self) -> str:
        """What the runtime serves its copy as: its last heartbeat's word, except that a
        runtime whose token is revoked is `unauthorized` from then on — its heartbeats are
        refused, so the console knows it before the runtime can say so."""
        return UNAUTHORIZED if self.token_revoked else self.instance.resolution


@dataclass
class EnvironmentRuntimes:
    """One environment's runtimes: counted over every runtime heard (in the database), with
    a page of them listed — so the card costs the same for 10 runtimes or 10,000."""

    environment: Environment
    live_etag: str
    live_since: datetime | None
    live_versions: dict[str, int]
    changed_long_ago: bool = False  # the live configuration is older than LAGGING_AFTER_SECONDS
    active: int = 0  # heard in the last GONE_AFTER_SECONDS and not stopped
    serving: int = 0  # of them, on the live configuration
    warning_count: int = 0  # of them, lagging or on an unsupported SDK
    listed: int = 0  # runtimes the runtimes page lists (`rows` is a page of them)
    stopped_today: int = 0
    rows: list[RuntimeRow] = field(default_factory=list)
    revoked_tokens: list[RuntimeToken] = field(default_factory=list)
    page: Page | None = None  # set when one environment is paged through
    manifest: Manifest | None = None  # what its runtime last reported it implements, by whom
    refused: AccessLogEntry | None = None  # a later report refused: it would break live

    @property
    def live_label(self) -> str:
        """`after_sales_consultation v4 · profile v2`, what "serve …" names."""
        return " · ".join(f"{key} v{number}" for key, number in sorted(self.live_versions.items()))

    @property
    def summary(self) -> str:
        if not self.active:
            return "No runtime has reported here in the last minutes."
        noun = "runtime serves" if self.active == 1 and self.serving == 1 else "runtimes serve"
        return f"{self.serving} of {self.active} {noun} {self.live_label or self.live_etag}"

    @property
    def more(self) -> int:
        """Listed runtimes the card leaves out (the runtimes page has them)."""
        return 0 if self.page is not None else max(0, self.listed - len(self.rows))


def _live_versions(payload: ConfigPayload | None) -> dict[str, int]:
    versions: dict[str, int] = {}
    if payload is not None and payload.body:
        body = json.loads(bytes(payload.body))
        if body.get("profile"):
            versions["profile"] = body["profile"]["version"]
        versions.update({k: v["version"] for k, v in (body.get("strategies") or {}).items()})
    return versions


def _revoked_tokens_in_use(agent: Agent) -> list[RuntimeToken]:
    """Revoked tokens covering `agent` that runtimes still call with (refusals flushed to the
    database or still counted in Redis)."""
    pending = refused_pending()
    revoked = list(
        RuntimeToken.objects.filter(revoked_at__isnull=False)
        .filter(Q(refused_count__gt=0) | Q(token_hash__in=list(pending)))
        .filter(Q(all_agents=True) | Q(agents=agent))
        .distinct()
    )
    for token in revoked:
        count, at = pending.get(token.token_hash, (0, ""))
        token.refused_count += count
        if at and (
            token.last_refused_at is None or datetime.fromisoformat(at) > token.last_refused_at
        ):
            token.last_refused_at = datetime.fromisoformat(at)
    return revoked


def runtimes_of_agent(
    *,
    agent: Agent,
    now: datetime | None = None,
    environment: Environment | None = None,
    page: int | str = 1,
) -> list[EnvironmentRuntimes]:
    """Per environment (promotion order), the runtimes serving `agent` heard in the last
    LISTED_FOR_HOURS, against the live configuration: counted in the database, the first
    CARD_ROWS of each listed — or, for one `environment`, its `page` of PAGE_ROWS — and the
    revoked tokens still in use there. A fixed number of queries, whatever the runtimes."""
    now = now or timezone.now()
    payloads = {
        p.environment_id: p
        for p in ConfigPayload.objects.filter(agent=agent).only(
            "environment_id", "etag", "body", "rendered_at"
        )
    }
    gone_before = now - timedelta(seconds=GONE_AFTER_SECONDS)
    active = Q(last_seen__gte=gone_before) & ~Q(transport=STOPPED)
    on_live = Q(pk__in=[])  # the live ETag of each environment, none where nothing is live
    for environment_id, payload in payloads.items():
        on_live |= Q(environment_id=environment_id, etag=payload.etag)
    heard = RuntimeInstance.objects.filter(
        agent=agent, last_seen__gte=now - timedelta(hours=LISTED_FOR_HOURS)
    )
    if environment is not None:
        heard = heard.filter(environment=environment)
    listed_q = ~Q(transport=STOPPED) | Q(
        last_seen__gte=now - timedelta(seconds=STOPPED_LISTED_SECONDS)
    )
    listed = heard.filter(listed_q)
    today = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    counts = (
        heard.values("environment_id", "sdk_version")
        .annotate(
            active=Count("pk", filter=active),
            serving=Count("pk", filter=active & on_live),
            listed=Count("pk", filter=listed_q),
            stopped_today=Count("pk", filter=Q(transport=STOPPED, last_seen__gte=today)),
        )
        .order_by()
    )
    # Problems first (on another configuration), then serving, gone, stopped; newest first.
    order = [
        Case(
            When(transport=STOPPED, then=Value(3)),
            When(last_seen__lt=gone_before, then=Value(2)),
            When(on_live, then=Value(1)),
            default=Value(0),
        ).asc(),
        F("first_seen").desc(),
        F("pk").desc(),  # not the instance id: comparing 10,000 texts by collation is slow
    ]
    paged = None
    if environment is None:
        # Ranked on narrow rows (the ids), then only those fetched whole: a sort of 10,000
        # whole rows spilled to disk.
        first = list(
            listed.annotate(
                position=Window(RowNumber(), partition_by=[F("environment_id")], order_by=order)
            )
            .filter(position__lte=CARD_ROWS)
            .values_list("pk", flat=True)
        )
        shown = list(
            RuntimeInstance.objects.filter(pk__in=first)
            .select_related("token")
            .order_by("environment_id", *order)
        )
    else:
        paged = Paginator(listed.select_related("token").order_by(*order), PAGE_ROWS).get_page(page)
        shown = list(paged.object_list)
    revoked = _revoked_tokens_in_use(agent)
    manifests = latest_manifests()
    refusals = manifest_refusals_since(manifests)

    result = []
    for env in [environment] if environment is not None else environment_list():
        payload = payloads.get(env.pk)
        live_etag = payload.etag if payload else ""
        live_since = payload.rendered_at if payload else None
        changed_long_ago = live_since is not None and (now - live_since).total_seconds() > (
            LAGGING_AFTER_SECONDS
        )
        runtimes = EnvironmentRuntimes(
            environment=env,
            live_etag=live_etag,
            live_since=live_since,
            live_versions=_live_versions(payload),
            changed_long_ago=changed_long_ago,
            revoked_tokens=[t for t in revoked if t.environment_id == env.pk],
            page=paged,
            manifest=manifests.get(env.pk),
            refused=refusals.get(env.pk),
        )
        for group in counts:
            if group["environment_id"] != env.pk:
                continue
            runtimes.active += group["active"]
            runtimes.serving += group["serving"]
            runtimes.listed += group["listed"]
            runtimes.stopped_today += group["stopped_today"]
            # a runtime needs attention when lagging, or (whatever it serves) on an old SDK
            lagging = group["active"] - group["serving"] if changed_long_ago else 0
            if sdk_supported(group["sdk_version"]) is False:
                runtimes.warning_count += group["active"]
            else:
                runtimes.warning_count += lagging
        for item in shown:
            if item.environment_id != env.pk:
                continue
            gone = item.transport == STOPPED or item.last_seen < gone_before
            current = not gone and bool(live_etag) and item.etag == live_etag
            runtimes.rows.append(
                RuntimeRow(
                    instance=item,
                    current=current,
                    lagging=not gone and not current and changed_long_ago,
                    gone=gone,
                    sdk_supported=sdk_supported(item.sdk_version),
                    token_revoked=item.token is not None and item.token.revoked_at is not None,
                )
            )
        if (
            runtimes.rows
            or runtimes.listed
            or runtimes.revoked_tokens
            or payload is not None
            or runtimes.manifest is not None
        ):
            result.append(runtimes)
    return result


def manifest_refusals_since(manifests: dict[int, Manifest]) -> dict[int, AccessLogEntry]:
    """{environment id: the latest manifest report refused there (strategies.runtime.manifests,
    written to the access log), when it came after the manifest kept}: a stray runtime using
    that environment's token, or a deploy that must wait for a publish. One query."""
    rows = (
        AccessLogEntry.objects.filter(
            action=AccessAction.MANIFEST_REFUSE.value, target_type=Environment._meta.label_lower
        )
        .order_by("target_id", "-id")
        .distinct("target_id")
    )
    latest = {}
    for row in rows:
        kept = manifests.get(int(row.target_id))
        if kept is None or row.occurred_at > kept.created_at:
            latest[int(row.target_id)] = row
    return latest


def runtime_instances_list(*, agents, environment: Environment | None = None):
    """The operator API's list: runtimes of `agents` (a queryset the caller may see), newest
    heard first."""
    items = RuntimeInstance.objects.filter(agent__in=agents).select_related(
        "agent", "environment", "token"
    )
    if environment is not None:
        items = items.filter(environment=environment)
    return items.order_by("-last_seen", "pk")

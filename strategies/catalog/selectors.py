"""Reads about what exists: environments, agents, and what each environment's runtime
implements.

The one place that turns a stored manifest into the validator's object, that says "no
manifest yet", that decides which sections count as sensitive, and that validates a body
against an environment — the editor, freeze, publish, the runtime's manifest report and the
health warnings all ask here, so they give the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from context_runtime import canonical, documents
from context_runtime.findings import Finding
from context_runtime.manifest import Manifest as RuntimeManifest
from django.db.models import Count, F

from console.kernel.errors import NotFound
from console.kernel.policy import agents_visible_to
from strategies.catalog.dependents import Reference, agent_documents
from strategies.catalog.models import Agent, Environment, Manifest


def environment_list(*, include_archived: bool = False) -> list[Environment]:
    """The environments in promotion order (sg-test, bank-uat, prod): the grids' columns and
    the publish targets. Archived ones only when asked (the catalog page)."""
    environments = Environment.objects.order_by("position", "key")
    if not include_archived:
        environments = environments.filter(archived_at__isnull=True)
    return list(environments)


def environment_get(*, key) -> Environment:
    """The environment with this key; an unknown one is 404 wherever it is named."""
    environment = Environment.objects.filter(key=key).first() if isinstance(key, str) else None
    if environment is None:
        raise NotFound(
            f"There is no environment {key}.",
            details=[Finding("environment", "not_found", f"Unknown environment {key}.").as_dict()],
        )
    return environment


def _with_documents(agents):
    return agents.prefetch_related(agent_documents().prefetch())


def agent_list(*, user, include_archived: bool = False) -> list[Agent]:
    """Agents the user may see (archived ones only when asked), each with its documents
    (profile first) prefetched: the agent list, the dashboard's agents, the API's list."""
    agents = agents_visible_to(user)
    if not include_archived:
        agents = agents.filter(archived_at__isnull=True)
    return list(_with_documents(agents.order_by("key")))


def agent_with_documents(*, agent: Agent) -> Agent:
    return _with_documents(Agent.objects.filter(pk=agent.pk)).get()


def agent_catalog(*, agents) -> list[Agent]:
    """The agents of `agents` (a queryset: those the user may manage), archived ones last,
    each with `document_count` and, for the archived, when they were archived."""
    return list(
        agents.annotate(document_count=Count("documents")).order_by(
            F("archived_at").desc(nulls_first=True), "key"
        )
    )


def agent_keys() -> frozenset[str]:
    """Every agent key (what `temporalAnchor.agentWhitelist` may name)."""
    return frozenset(Agent.objects.values_list("key", flat=True))


# --- manifests ---------------------------------------------------------------------------------
def manifest_latest(*, environment: Environment) -> Manifest | None:
    return environment.manifests.order_by("-version").first()


def references_to_environment(environment: Environment) -> list[Reference]:
    """The manifests its runtime reported refer to an environment (its delete is refused)."""
    if Manifest.objects.filter(environment=environment).exists():
        return [Reference("has_manifests", "its runtime reported a manifest")]
    return []


def latest_manifests() -> dict[int, Manifest]:
    """{environment id: its latest Manifest row}, in one query."""
    rows = Manifest.objects.order_by("environment_id", "-version").distinct("environment_id")
    return {row.environment_id: row for row in rows}


def runtime_manifest(*, environment: Environment, row: Manifest | None = None):
    """The environment's latest manifest as the validator's object (None: none reported).
    Pass `row` when it is already at hand."""
    row = row or manifest_latest(environment=environment)
    if row is None:
        return None
    return RuntimeManifest.from_dict(row.body, name=environment.key)


def manifest_wire(*, environment: Environment, body: dict) -> tuple[dict, str]:
    """A valid manifest body's normalised wire form and its content hash: the order of names
    does not make a manifest different (what is stored, and what "unchanged" compares)."""
    wire = RuntimeManifest.from_dict(body, name=environment.key).to_dict()
    return wire, canonical.content_hash(wire)


def no_manifest_finding(environment: Environment) -> Finding:
    return Finding(
        "",
        "no_manifest",
        f"The {environment.key} runtime has not reported what it implements yet, so nothing "
        "can be checked against it. Connect the runtime first (PUT /api/v1/runtime/manifest).",
    )


# --- sensitivity -------------------------------------------------------------------------------
def sensitive_section_keys() -> frozenset[str]:
    """Sections any environment's runtime declares sensitive. With the sections known to be
    sensitive (context_runtime.documents.is_sensitive) they make the one rule: a runtime can
    add a sensitive section, never declassify one for everybody."""
    keys = set()
    for row in latest_manifests().values():
        for entry in row.body.get("sections") or []:
            if isinstance(entry, dict) and entry.get("sensitive") and "key" in entry:
                keys.add(entry["key"])
    return frozenset(keys)


def sensitive_sections_on(body) -> list[str]:
    """Keys of sensitive sections a profile body switches on, in document order."""
    return documents.sensitive_sections_enabled(body, sensitive=sensitive_section_keys())


def sensitive_paths_added(body, *, baseline: list) -> list[str]:
    """Paths (`sections.<block>.<key>`) of the sensitive sections `body` switches on that
    none of the `baseline` bodies had on: what needs the permission to enable sensitive
    sections. Saving a draft compares with its parent and the saved draft; publishing with
    what is live in the target environment."""
    sensitive = sensitive_section_keys()
    already = set()
    for earlier in baseline:
        already.update(documents.sensitive_sections_enabled(earlier, sensitive=sensitive))
    added = [k for k in documents.sensitive_sections_enabled(body, sensitive=sensitive)]
    added = [k for k in added if k not in already]
    sections = body.get("sections") if isinstance(body, dict) else None
    paths = []
    for block, entries in sections.items() if isinstance(sections, dict) else ():
        for key in entries if isinstance(entries, dict) else ():
            if key in added and f"sections.{block}.{key}" not in paths:
                paths.append(f"sections.{block}.{key}")
    return paths


# --- validation against an environment ---------------------------------------------------------
@dataclass(frozen=True)
class ValidationContext:
    """What validating against an environment needs, read once for many bodies."""

    environment: Environment | None
    manifest_row: Manifest | None
    manifest: RuntimeManifest | None
    agent_keys: frozenset[str]
    sensitive: frozenset[str]


def validation_context(
    *, environment: Environment | None = None, candidate: RuntimeManifest | None = None
) -> ValidationContext:
    """`candidate`: judge against a manifest not stored yet (a runtime's report, before it is
    accepted) instead of the environment's latest."""
    row = manifest_latest(environment=environment) if environment and candidate is None else None
    if candidate is None and row is not None:
        candidate = runtime_manifest(environment=environment, row=row)
    return ValidationContext(
        environment=environment,
        manifest_row=row,
        manifest=candidate,
        agent_keys=agent_keys(),
        sensitive=sensitive_section_keys(),
    )


def body_findings(
    *,
    kind: str,
    body,
    environment: Environment | None = None,
    context: ValidationContext | None = None,
) -> list[Finding]:
    """Every finding for a body: structure always; with an environment, also against what its
    runtime implements now (or that it has not reported yet). Pass a `context` from
    `validation_context` to validate many bodies against one environment."""
    context = context or validation_context(environment=environment)
    findings = documents.validate_document(
        kind,
        body,
        context.manifest,
        agent_keys=context.agent_keys,
        sensitive=context.sensitive,
    )
    if context.environment is not None and context.manifest is None:
        findings.insert(0, no_manifest_finding(context.environment))
    if context.environment is not None and context.environment.archived_at is not None:
        findings.insert(0, archived_finding(context.environment))
    return findings


def runtime_feature_finding(
    *, environment: Environment, feature: str, context: ValidationContext | None = None
) -> Finding | None:
    """Why `environment`'s runtime cannot do `feature` (e.g. run a shadow): its latest
    manifest does not list it in `features` — a manifest from before the field lists none.
    None when it does, or when no manifest was reported (`no_manifest_finding` says that)."""
    context = context or validation_context(environment=environment)
    if context.manifest is None or context.manifest.supports(feature):
        return None
    declared = ", ".join(sorted(context.manifest.features)) or "none"
    row = context.manifest_row
    return Finding(
        "features",
        f"{feature}_unsupported",
        f"The {environment.key} runtime does not declare {feature} support in its manifest "
        f"(features it declares: {declared}{f'; manifest v{row.version}' if row else ''}). "
        f'Upgrade it to an SDK that runs {feature} releases (its manifest lists "{feature}" '
        "in features) and let it report again.",
    )


ARCHIVED = "environment_archived"


def archived_finding(environment: Environment, path: str = "") -> Finding:
    """Why nothing new goes into an archived environment: a publish, a runtime token."""
    return Finding(
        path,
        ARCHIVED,
        f"{environment.key} is archived: nothing new goes live there. An admin can unarchive "
        "it under Agents & environments.",
    )

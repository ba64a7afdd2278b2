"""Reads for this app. Views and API views call these; they never build querysets inline."""

from __future__ import annotations

from dataclasses import dataclass, field

from context_runtime import diff, vocabulary
from context_runtime.findings import FLAG, blocking
from django.db.models import Prefetch

from console.kernel.errors import NotFound
from console.kernel.models import AuditRecord
from strategies.catalog.dependents import Reference
from strategies.catalog.models import Agent, Environment, Manifest
from strategies.catalog.selectors import (
    agent_list,  # noqa: F401 - the agent list is the catalog's; the pages ask here
    body_findings,
    environment_list,
    latest_manifests,
    manifest_latest,
    sensitive_section_keys,
)
from strategies.documents.models import Document, Version


def live_versions(*, document) -> dict[str, object]:
    """{environment key: live Version} for one document. Through the document's `releases`
    relation (as `document_list` prefetches it): the releases job builds on this one, so this
    one does not import it."""

    return {
        r.environment.key: r.version
        for r in document.releases.select_related("environment", "version")
    }


def unreviewed_in(*, document, version) -> list[str]:
    """Environment keys where `version` went live unreviewed (published, or rolled back to,
    while a break-glass had switched that environment's approval off), in promotion order.
    Through the same `releases` relation, and their `events`."""
    return list(
        document.releases.filter(events__to_version=version, events__unreviewed=True)
        .order_by("environment__position")
        .values_list("environment__key", flat=True)
        .distinct()
    )


# --------------------------------------------------------------------------- agents, documents


def document_list(*, agent: Agent) -> list[Document]:
    """The agent's documents, profile first, each with `latest` (newest frozen version),
    `draft` (the open draft or None), `live` ({environment key: Version}) and `live_row`
    (the live Version or None per environment, in environment order)."""
    docs = list(
        Document.objects.filter(agent=agent)
        .order_by("-kind", "key")
        .prefetch_related(
            Prefetch("versions", queryset=Version.objects.order_by("-number")),
            "releases__environment",
            "releases__version",
        )
    )
    environments = environment_list()
    for doc in docs:
        versions = list(doc.versions.all())
        doc.draft = next((v for v in versions if v.is_draft), None)
        doc.latest = next((v for v in versions if not v.is_draft), None)
        doc.version_count = sum(1 for v in versions if not v.is_draft)
        doc.live = {r.environment.key: r.version for r in doc.releases.all()}
        doc.live_row = [doc.live.get(env.key) for env in environments]  # table cells
    return docs


def document_get(*, agent: Agent, key: str) -> Document:
    document = Document.objects.filter(agent=agent, key=key).select_related("agent").first()
    if document is None:
        raise NotFound(f"{agent.key} has no document named {key}.")
    return document


def version_list(*, document: Document) -> list[Version]:
    """Every version, newest first, each with `live_in` (environment keys serving it)."""
    live: dict[int, list[str]] = {}
    for env_key, version in live_versions(document=document).items():
        live.setdefault(version.pk, []).append(env_key)
    order = {e.key: e.position for e in Environment.objects.all()}
    versions = list(document.versions.select_related("author").order_by("-number"))
    for version in versions:
        version.live_in = sorted(live.get(version.pk, []), key=lambda k: order.get(k, 0))
    return versions


def version_get(*, document: Document, number) -> Version:
    version = (
        Version.objects.filter(document=document, number=_as_int(number, "number"))
        .select_related("document__agent", "parent", "author")
        .first()
    )
    if version is None:
        raise NotFound(f"{document} has no version {number}.")
    return version


def draft_get(*, document: Document) -> Version | None:
    return document.versions.filter(state=Version.State.DRAFT).first()


def latest_frozen(*, document: Document) -> Version | None:
    return document.versions.filter(state=Version.State.FROZEN).order_by("-number").first()


def _as_int(value, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise NotFound(f"No version {value!r}.") from None


# --------------------------------------------------------------------------- manifests, validation


@dataclass
class ValidationReport:
    """What the editor and the validate endpoint show: findings at their paths."""

    errors: list[dict] = field(default_factory=list)  # block saving
    flags: list[dict] = field(default_factory=list)  # need a capability (sensitive sections)
    manifest_errors: list[dict] = field(default_factory=list)  # only against the manifest
    environment: str = ""
    manifest_version: int | None = None
    manifest: Manifest | None = None  # for the page's "which runtime reported it"; not in the API

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict:
        return {
            "valid": self.ok and not self.manifest_errors,
            "errors": self.errors,
            "flags": self.flags,
            "manifest_errors": self.manifest_errors,
            "environment": self.environment or None,
            "manifest_version": self.manifest_version,
        }


def document_validate(
    *, kind: str, body, environment: Environment | None = None
) -> ValidationReport:
    """Structural findings, plus (with an environment) what its runtime does not implement."""
    found = body_findings(kind=kind, body=body)
    report = ValidationReport(
        errors=[e.as_dict() for e in blocking(found)],
        flags=[e.as_dict() for e in found if e.severity == FLAG],
    )
    if environment is not None:
        report.environment = environment.key
        row = manifest_latest(environment=environment)
        report.manifest_version = row.version if row else None
        report.manifest = row
        structural = {(e["path"], e["code"]) for e in report.errors + report.flags}
        report.manifest_errors = [
            e.as_dict()
            for e in blocking(body_findings(kind=kind, body=body, environment=environment))
            if (e.path, e.code) not in structural
        ]
    return report


# --------------------------------------------------------------------------- diff, profile grid


def readable_body(kind: str, body):
    """The body with keys in the contract's order (Postgres jsonb does not keep key order),
    so the editor, the version page and exported files read the same every time."""
    if not isinstance(body, dict):
        return body
    top = vocabulary.STRATEGY_FIELDS if kind == vocabulary.STRATEGY else vocabulary.PROFILE_FIELDS
    nested = {
        "budget": vocabulary.BUDGET_FIELDS,
        "history": vocabulary.HISTORY_FIELDS,
        "snapshot": vocabulary.SNAPSHOT_FIELDS,
        "sections": vocabulary.BLOCKS,
        "switches": tuple(vocabulary.KNOWN_SWITCHES),
    }
    result = {}
    for key in _in_order(body, top):
        value = body[key]
        if key in nested and isinstance(value, dict):
            value = {k: value[k] for k in _in_order(value, nested[key])}
            if key == "sections":
                value = {
                    block: {
                        k: entries[k]
                        for k in _in_order(entries, vocabulary.KNOWN_SECTIONS.get(block, ()))
                    }
                    if isinstance(entries, dict)
                    else entries
                    for block, entries in value.items()
                }
        result[key] = value
    return result


def _in_order(mapping: dict, known) -> list:
    rank = {k: i for i, k in enumerate(known)}
    return sorted(mapping, key=lambda k: (0, rank[k], "") if k in rank else (1, 0, str(k)))


def version_diff(*, document: Document, before: Version | None, after: Version | None):
    """Field-by-field changes from `before` to `after` (either may be None)."""
    return diff.diff_bodies(
        document.kind, before.body if before else None, after.body if after else None
    )


@dataclass
class GridRow:
    block: str
    key: str
    sensitive: bool
    draft: bool | None  # None: the section is not in the body
    live: list[tuple[str, bool | None, bool]]  # (environment key, value, differs from draft)
    latest: bool | None
    implemented_everywhere: bool = True

    @property
    def name(self) -> str:
        return f"sections.{self.block}.{self.key}"


def profile_grid(*, document: Document, body: dict, environments: list[Environment]) -> dict:
    """The contextSections grid: one row per section (blocks × sections) with the draft (or
    latest) value and the live value in each environment, changes flagged."""
    live = live_versions(document=document)
    latest = latest_frozen(document=document)
    sensitive = sensitive_section_keys()
    sections = body.get("sections") or {}
    manifests = latest_manifests()
    rows: dict[str, list[GridRow]] = {}
    for block in vocabulary.BLOCKS:
        keys = list(vocabulary.KNOWN_SECTIONS[block])
        keys += [k for k in (sections.get(block) or {}) if k not in keys]
        for env in environments:
            row = manifests.get(env.pk)
            for entry in (row.body.get("sections") or []) if row else []:
                if entry.get("block") == block and entry["key"] not in keys:
                    keys.append(entry["key"])
        block_rows = []
        for key in keys:
            value = (sections.get(block) or {}).get(key)
            cells = []
            for env in environments:
                version = live.get(env.key)
                live_value = _section_value(version.body, block, key) if version else None
                cells.append((env.key, live_value, version is not None and live_value != value))
            block_rows.append(
                GridRow(
                    block=block,
                    key=key,
                    sensitive=key in sensitive,
                    draft=value,
                    live=cells,
                    latest=_section_value(latest.body, block, key) if latest else None,
                )
            )
        rows[block] = block_rows
    switches = []
    body_switches = body.get("switches") or {}
    for name, spec in vocabulary.KNOWN_SWITCHES.items():
        value = body_switches.get(name)
        cells = []
        for env in environments:
            version = live.get(env.key)
            live_value = (version.body.get("switches") or {}).get(name) if version else None
            differs = version is not None and live_value != value
            cells.append((env.key, _switch_text(live_value), differs))
        switches.append(
            {
                "name": name,
                "value": value,
                "kind": "bool" if spec is bool else "choice" if isinstance(spec, tuple) else "list",
                "choices": spec if isinstance(spec, tuple) else (),
                "text": ", ".join(map(str, value)) if isinstance(value, list) else "",
                "live": cells,
            }
        )
    return {
        "blocks": [(block, vocabulary.BLOCK_LABELS[block], rows[block]) for block in rows],
        "switches": switches,
        "live_environments": [e for e in environments if e.key in live],
    }


def _switch_text(value) -> str:
    """A switch value as the grid shows it."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "empty"
    return str(value)


def _section_value(body, block: str, key: str):
    value = ((body or {}).get("sections") or {}).get(block, {})
    return value.get(key) if isinstance(value, dict) else None


def last_saved_by(*, version: Version) -> str:
    """Who last wrote this draft or version, from the audit log (the version keeps only its
    first author)."""

    label = (
        AuditRecord.objects.filter(target_type="strategies.version", target_id=str(version.pk))
        .order_by("-id")
        .values_list("actor_label", flat=True)
        .first()
    )
    return label or version.author_label


# --------------------------------------------------------------------------- what the catalog asks


def references_to_agent(agent: Agent) -> list[Reference]:
    """Frozen versions refer to their agent for good (its delete is refused)."""
    if Version.objects.filter(document__agent=agent, state=Version.State.FROZEN).exists():
        return [Reference("has_frozen_versions", "it has frozen versions, which are kept for good")]
    return []


def agent_documents_prefetch() -> Prefetch:
    """An agent's documents as its lists show them (`Agent.documents`, in this order)."""
    return Prefetch("documents", queryset=Document.objects.order_by("-kind", "key"))

"""Reads for configuration as code: an agent's configuration as the file's data, and the plan
of an import — what applying a file would change, document by document and environment by
environment, with every finding — computed without writing anything.

The plan is what the dry run shows and exactly what `services.config_apply` carries out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from context_runtime import canonical
from context_runtime.diff import Change, diff_bodies
from context_runtime.findings import Finding, blocking
from django.db.models import Prefetch

from console.kernel.errors import NotFound
from console.kernel.policy import Capability, check_user_can, sensitive_refusals, user_can
from strategies.catalog.models import Agent
from strategies.catalog.selectors import (
    body_findings,
    environment_list,
    sensitive_paths_added,
    validation_context,
)
from strategies.documents.models import Document, Version
from strategies.exchange.format import FORMAT, FORMAT_VERSION, ConfigFile, FileDocument
from strategies.releases.selectors import (
    APPROVAL_REQUIRED,
    CHANGE_RECORD_REQUIRED,
    NOT_ALLOWED,
    NOT_FOUND,
    SENSITIVE_SECTION,
    UNREVIEWED,
    body_publish_refusals,
    is_runtime_finding,
    live_by_document,
    live_numbers,
    pending_by_document,
    runtime_refusals,
)

# --------------------------------------------------------------------------- export


def config_export(*, agent: Agent) -> dict:
    """The agent's configuration as the file's data: every frozen version of every document
    (oldest first), the open draft, and what is live in each environment."""
    documents = Document.objects.filter(agent=agent).prefetch_related(
        Prefetch("versions", queryset=Version.objects.order_by("number"))
    )
    data_documents = []
    for document in sorted(documents, key=lambda d: (d.kind != Document.Kind.PROFILE, d.key)):
        versions = list(document.versions.all())
        draft = next((v for v in versions if v.is_draft), None)
        data_documents.append(
            {
                "key": document.key,
                "kind": document.kind,
                "name": document.name,
                "versions": [_version_data(v) for v in versions if not v.is_draft],
                "draft": _version_data(draft) if draft else None,
            }
        )
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "agent": {"key": agent.key, "name": agent.name, "description": agent.description},
        "documents": data_documents,
        "live": live_numbers(agent=agent),
    }


def _version_data(version: Version) -> dict:
    return {"number": version.number, "body": version.body, "note": version.note}


# --------------------------------------------------------------------------- the plan


@dataclass
class VersionStep:
    """One version of the file: already here (`exists`), the same content as the latest
    version here (`same_as_latest`), or to be created with the next number (`create`)."""

    file_number: int
    number: int  # the number it has (or will have) here
    action: str
    note: str
    body: dict = field(repr=False)
    changes: list[Change] = field(default_factory=list)  # from the version before it here

    def as_dict(self) -> dict:
        return {
            "file_number": self.file_number,
            "number": self.number,
            "action": self.action,
            "note": self.note,
            "changes": [c.as_dict() for c in self.changes],
        }


@dataclass
class DraftStep:
    """The file's open draft against the one here: `create`, `update`, `unchanged`, or
    `kept` (the file has none; the draft here is left alone)."""

    number: int
    action: str
    note: str
    body: dict | None = field(repr=False, default=None)
    revision: int | None = None
    changes: list[Change] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "number": self.number,
            "action": self.action,
            "note": self.note,
            "revision": self.revision,
            "changes": [c.as_dict() for c in self.changes],
        }


@dataclass
class DocumentPlan:
    key: str
    kind: str
    name: str
    path: str
    exists: bool
    versions: list[VersionStep] = field(default_factory=list)
    draft: DraftStep | None = None

    @property
    def creates(self) -> list[VersionStep]:
        return [s for s in self.versions if s.action == "create"]

    @property
    def changed(self) -> bool:
        return (
            not self.exists
            or bool(self.creates)
            or (self.draft is not None and self.draft.action in ("create", "update"))
        )

    def as_dict(self) -> dict:
        return {
            "key": self.key,
            "kind": self.kind,
            "name": self.name,
            "path": self.path,
            "action": "create" if not self.exists else "update" if self.changed else "unchanged",
            "versions": [s.as_dict() for s in self.versions],
            "draft": self.draft.as_dict() if self.draft else None,
        }


@dataclass
class ReleaseStep:
    """What the file says is live in one environment for one document, against what is live
    here: `unchanged`, `publish`, `request` (a protected environment: an approval request),
    or `skip` with the reason (not allowed, a request already waits, …). `refusals` is the
    publish judgement (`strategies.releases.selectors.publish_refusals`) it was decided by;
    `findings` its target runtime's findings at their place in the file."""

    environment: str
    document: str
    file_number: int
    number: int
    live_number: int | None
    action: str
    reason: str = ""
    changes: list[Change] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    manifest_version: int | None = None
    refusals: list[Finding] = field(default_factory=list, repr=False)

    @property
    def writes(self) -> bool:
        return self.action in ("publish", "request")

    def as_dict(self) -> dict:
        return {
            "environment": self.environment,
            "document": self.document,
            "file_number": self.file_number,
            "number": self.number,
            "live_number": self.live_number,
            "action": self.action,
            "reason": self.reason,
            "manifest_version": self.manifest_version,
            "changes": [c.as_dict() for c in self.changes],
            "findings": self.findings,
        }


@dataclass
class Plan:
    agent_key: str
    agent_name: str
    agent_description: str
    agent_exists: bool
    file_sha256: str
    documents: list[DocumentPlan] = field(default_factory=list)
    releases: list[ReleaseStep] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)  # block the apply: nothing is written
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def changes_anything(self) -> bool:
        return (
            not self.agent_exists
            or any(d.changed for d in self.documents)
            or any(r.writes for r in self.releases)
        )

    @property
    def plan_hash(self) -> str:
        """Binds an apply to this plan: the file's content and what it would do here now."""
        material = {**self._body(), "file_sha256": self.file_sha256}
        return hashlib.sha256(
            json.dumps(material, sort_keys=True, default=str).encode()
        ).hexdigest()

    def counts(self) -> dict:
        return {
            "documents_created": sum(1 for d in self.documents if not d.exists),
            "versions_created": sum(len(d.creates) for d in self.documents),
            "drafts_written": sum(
                1 for d in self.documents if d.draft and d.draft.action in ("create", "update")
            ),
            "publishes": sum(1 for r in self.releases if r.action == "publish"),
            "approval_requests": sum(1 for r in self.releases if r.action == "request"),
            "skipped": sum(1 for r in self.releases if r.action == "skip"),
        }

    def _body(self) -> dict:
        return {
            "agent": {
                "key": self.agent_key,
                "name": self.agent_name,
                "description": self.agent_description,
                "action": "unchanged" if self.agent_exists else "create",
            },
            "documents": [d.as_dict() for d in self.documents],
            "releases": [r.as_dict() for r in self.releases],
            "errors": self.errors,
            "notes": self.notes,
        }

    def as_dict(self) -> dict:
        return {
            **self._body(),
            "file_sha256": self.file_sha256,
            "plan": self.plan_hash,
            "valid": self.ok,
            "changes_anything": self.changes_anything,
            "counts": self.counts(),
        }


def config_target(*, agent_key: str, actor) -> Agent | None:
    """The agent an import goes to, after the policy: an existing one needs EDIT_DRAFTS on it
    (404 when it is out of the user's scope); a new one needs MANAGE_CATALOG on all agents —
    without it the agent is 404 as well, so nobody learns which agents exist. A command run
    without --as acts as the operator's shell (None): it may write documents of an existing
    agent, but not create one or publish."""
    agent = Agent.objects.filter(key=agent_key).first()
    person = getattr(actor, "is_authenticated", False)
    if agent is not None:
        if person:
            check_user_can(actor, Capability.EDIT_DRAFTS, agent)
        return agent
    if person and not user_can(actor, Capability.MANAGE_CATALOG):
        raise NotFound("Not found.")
    return None


def _error(path: str, code: str, message: str) -> dict:
    return Finding(path, code, message).as_dict()


def _prefix(path: str, finding: dict, **extra) -> dict:
    inner = finding.get("path") or ""
    return {**finding, "path": f"{path}.{inner}" if inner else path, **extra}


def config_plan(*, config: ConfigFile, agent_key: str, actor) -> Plan:
    """What applying `config` to `agent_key` would do now, as `actor` — and every finding
    that stops it (structure, each target environment's manifest, permissions)."""
    agent = config_target(agent_key=agent_key, actor=actor)
    person = bool(getattr(actor, "is_authenticated", False))
    plan = Plan(
        agent_key=agent_key,
        agent_name=config.agent_name or agent_key,
        agent_description=config.agent_description,
        agent_exists=agent is not None,
        file_sha256=config.sha256,
    )
    if config.agent_key != agent_key:
        plan.errors.append(
            _error(
                "agent.key",
                "other_agent",
                f"This file is the configuration of {config.agent_key}, not "
                f"{agent_key}. Import it into {config.agent_key}, or change agent.key.",
            )
        )
    if agent is None and not person:
        plan.errors.append(
            _error(
                "agent.key",
                "needs_person",
                f"There is no agent {agent_key}; creating one needs a person with "
                "the manage_catalog permission (run the command with --as USERNAME).",
            )
        )
    elif agent is not None and (agent.name, agent.description) != (
        plan.agent_name,
        plan.agent_description,
    ):
        plan.notes.append(
            f"The agent's name or description differs from the file's; an import does not "
            f"change them (here: {agent.name!r})."
        )

    def refused_sensitive(paths: list[str]) -> list[Finding]:
        # The policy's answer, as saving a draft gets it; the operator's shell may.
        return sensitive_refusals(actor, agent, paths) if person else []

    existing = {
        d.key: d
        for d in (
            Document.objects.filter(agent=agent).prefetch_related(
                Prefetch("versions", queryset=Version.objects.order_by("number"))
            )
            if agent
            else []
        )
    }
    targets: dict[str, dict[int, VersionStep]] = {}
    for file_doc in config.documents:
        doc_plan, mapping = _document_plan(
            file_doc, existing.get(file_doc.key), plan.errors, refused_sensitive
        )
        plan.documents.append(doc_plan)
        targets[file_doc.key] = mapping
    _release_plan(plan, config, agent, targets, actor, person)
    return plan


def _document_plan(
    file_doc: FileDocument, document: Document | None, errors: list, refused_sensitive
):
    """The steps for one document, and {file version number: its VersionStep}."""
    versions = list(document.versions.all()) if document else []
    frozen = {v.number: v for v in versions if not v.is_draft}
    open_draft = next((v for v in versions if v.is_draft), None)
    latest = max(frozen.values(), key=lambda v: v.number) if frozen else None
    doc_plan = DocumentPlan(
        key=file_doc.key,
        kind=file_doc.kind,
        name=file_doc.name,
        path=file_doc.path,
        exists=document is not None,
    )
    if document is not None and document.kind != file_doc.kind:
        errors.append(
            _error(
                f"{file_doc.path}.kind",
                "kind_differs",
                f"{file_doc.key} is a {document.kind} here, not a {file_doc.kind}.",
            )
        )
    # The number draft_create will give: past every version and every discarded draft.
    given = document.last_version_number if document else 0
    next_number = max([given, *(v.number for v in versions)]) + 1
    current_body = latest.body if latest else None  # what a new version is compared with
    mapping: dict[int, VersionStep] = {}
    for file_version in file_doc.versions:
        body = file_version.body
        _body_errors(file_doc, file_version.path, body, errors)
        digest = canonical.content_hash(body)
        same_number = frozen.get(file_version.number)
        if same_number is not None and same_number.content_hash == digest:
            step = VersionStep(
                file_version.number, same_number.number, "exists", same_number.note, body
            )
        elif latest is not None and latest.content_hash == digest:
            step = VersionStep(file_version.number, latest.number, "same_as_latest", "", body)
        else:
            step = VersionStep(
                file_version.number,
                next_number,
                "create",
                file_version.note,
                body,
                changes=diff_bodies(file_doc.kind, current_body, body),
            )
            _sensitive_errors(
                file_version.path, body, current_body, errors, refused=refused_sensitive
            )
            next_number += 1
            current_body = body
        doc_plan.versions.append(step)
        mapping[file_version.number] = step
    if doc_plan.creates and open_draft is not None:
        errors.append(
            _error(
                file_doc.path,
                "draft_open",
                f"{file_doc.key} has an open draft here (v{open_draft.number}, "
                f"{open_draft.author_label}); new versions cannot be added while it is open. "
                "Freeze or discard it first.",
            )
        )
    doc_plan.draft = _draft_step(
        file_doc, open_draft, next_number, current_body, errors, refused_sensitive
    )
    return doc_plan, mapping


def _draft_step(file_doc, open_draft, next_number, current_body, errors, refused_sensitive):
    wanted = file_doc.draft
    if wanted is None:
        if open_draft is None:
            return None
        return DraftStep(open_draft.number, "kept", open_draft.note, revision=open_draft.revision)
    _body_errors(file_doc, wanted.path, wanted.body, errors)
    if open_draft is None:
        _sensitive_errors(wanted.path, wanted.body, current_body, errors, refused=refused_sensitive)
        return DraftStep(
            next_number,
            "create",
            wanted.note,
            wanted.body,
            changes=diff_bodies(file_doc.kind, current_body, wanted.body),
        )
    if open_draft.content_hash == canonical.content_hash(wanted.body):
        return DraftStep(
            open_draft.number, "unchanged", open_draft.note, revision=open_draft.revision
        )
    _sensitive_errors(
        wanted.path,
        wanted.body,
        open_draft.body,
        errors,
        refused=refused_sensitive,
        also=[current_body],
    )
    return DraftStep(
        open_draft.number,
        "update",
        wanted.note,
        wanted.body,
        revision=open_draft.revision,
        changes=diff_bodies(file_doc.kind, open_draft.body, wanted.body),
    )


def _body_errors(file_doc: FileDocument, path: str, body: dict, errors: list) -> None:
    for finding in blocking(body_findings(kind=file_doc.kind, body=body)):
        errors.append(_prefix(f"{path}.body", finding.as_dict()))


def _sensitive_errors(path, body, before, errors, *, refused, also=()) -> None:
    """Switching a sensitive section on needs ENABLE_SENSITIVE, as in the editor: `refused`
    answers which of the sections switched on the person may not (the policy's findings)."""
    baseline = [b for b in (before, *also) if b is not None]
    for finding in refused(sensitive_paths_added(body, baseline=baseline)):
        errors.append(_prefix(f"{path}.body", finding.as_dict()))


def _release_plan(plan, config, agent, targets, actor, person):
    # Archived environments too: the publish judgement says why nothing goes live there.
    environments = {e.key: e for e in environment_list(include_archived=True)}
    for env_key in config.live:
        if env_key not in environments:
            plan.errors.append(
                _error(
                    f"live.{env_key}",
                    "unknown_environment",
                    f"There is no environment {env_key} in this console; create it "
                    "first, or remove it from the file.",
                )
            )
    documents = {d.key: d for d in config.documents}
    for env_key, environment in environments.items():
        wanted = config.live.get(env_key)
        if not wanted:
            continue
        context = validation_context(environment=environment)
        manifest_version = context.manifest_row.version if context.manifest_row else None
        live = live_by_document(agent=agent, environment=environment) if agent else {}
        pending = pending_by_document(agent=agent, environment=environment) if agent else {}
        for doc_key in [d.key for d in config.documents if d.key in wanted]:
            file_doc = documents[doc_key]
            step = targets[doc_key][wanted[doc_key]]
            release = live.get(doc_key)
            live_number = release.version.number if release else None
            entry = ReleaseStep(
                environment=env_key,
                document=doc_key,
                file_number=wanted[doc_key],
                number=step.number,
                live_number=live_number,
                action="unchanged",
                manifest_version=manifest_version,
            )
            plan.releases.append(entry)
            if step.action != "create" and live_number == step.number:
                continue
            entry.changes = diff_bodies(
                file_doc.kind, release.version.body if release else None, step.body
            )
            if person:
                entry.refusals = body_publish_refusals(
                    actor=actor,
                    agent=agent,
                    environment=environment,
                    document_key=doc_key,
                    kind=file_doc.kind,
                    number=step.number if step.action != "create" else None,
                    body=step.body,
                    live=release,
                    pending=pending.get(doc_key),
                    context=context,
                )
            else:  # nobody to publish as: what the runtime lacks is still shown
                entry.refusals = runtime_refusals(
                    kind=file_doc.kind, body=step.body, environment=environment, context=context
                )
            # What this environment's runtime lacks; the body's own findings are the
            # document's (reported once, at its version).
            structural = {
                (f.path, f.code) for f in body_findings(kind=file_doc.kind, body=step.body)
            }
            entry.findings = [
                _prefix(
                    f"{file_doc.version(wanted[doc_key]).path}.body",
                    f.as_dict(),
                    environment=env_key,
                )
                for f in entry.refusals
                if is_runtime_finding(f) and (f.path, f.code) not in structural
            ]
            entry.action, entry.reason = _release_action(entry.refusals, person=person)
            if entry.writes:
                plan.errors.extend(
                    {**f, "message": f"{env_key}: {f['message']}"} for f in entry.findings
                )


# Refusals that skip a publish rather than stop the import: the person may not (403), or a
# request already waits there (409).
_NOT_ALLOWED = (NOT_FOUND, NOT_ALLOWED, SENSITIVE_SECTION)


def _release_action(refusals: list[Finding], *, person: bool) -> tuple[str, str]:
    """The step's action and its reason, in the publish judgement's words: `skip` when the
    person may not or a request waits, `request` where the environment is protected, else
    `publish` (the target runtime's findings, if any, then stop the import)."""
    if not person:
        return "skip", "Publishing needs a person: run the command with --as USERNAME."
    refused = [
        f
        for f in blocking(refusals)
        if not is_runtime_finding(f) and f.code != CHANGE_RECORD_REQUIRED
    ]
    if refused:
        first = refused[0]
        prefix = "Not allowed: " if first.code in _NOT_ALLOWED else ""
        messages = " ".join(f.message for f in refused if f.code == first.code)
        return "skip", f"{prefix}{messages} Skipped."
    # A second person, or the external change system (the publish sends its request): both
    # leave the version waiting, not live.
    waits = [f for f in refusals if f.code in (APPROVAL_REQUIRED, CHANGE_RECORD_REQUIRED)]
    if waits:
        return "request", " ".join(f.message for f in waits)
    unreviewed = next((f for f in refusals if f.code == UNREVIEWED), None)
    return "publish", unreviewed.message if unreviewed is not None else ""

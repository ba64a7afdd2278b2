"""Writes for configuration as code: recording an export in the access log, and applying an
imported file — the plan of `selectors.config_plan`, carried out through the documents,
releases and catalog services in one transaction (all of it, or nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field

from console.kernel.audit import AccessAction, AuditAction, access_record, audit_record
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.limits import too_large
from console.kernel.transactions import service_transaction
from console.kernel.wording import counted
from strategies.catalog.models import Agent, Environment
from strategies.catalog.services import agent_create
from strategies.documents.models import Document, Version
from strategies.documents.services import (
    document_create,
    draft_create,
    draft_update,
    version_freeze,
)
from strategies.exchange.format import MAX_FILE_BYTES, ConfigFile, file_read, file_text
from strategies.exchange.selectors import Plan, config_export, config_plan
from strategies.releases.services import release_publish


def config_export_text(*, agent: Agent, actor) -> str:
    """The agent's configuration file. An export is a read of configuration (not of traces):
    no audit row, but one access-log row, so who took a copy of it stays on record."""
    text = file_text(config_export(agent=agent))
    access_record(
        actor=actor,
        action=AccessAction.CONFIG_EXPORT,
        target=agent,
        agent=agent,
        detail={"bytes": len(text.encode())},
    )
    return text


def config_read(data) -> ConfigFile:
    """The file, or 400 with every structural finding at its path (413 over the limit,
    measured as this console writes it, however it arrived)."""
    # surrogatepass: a lone surrogate is measured here and refused, at its path, by file_read
    if len(file_text(data).encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise too_large("The configuration file", MAX_FILE_BYTES)
    config, findings = file_read(data)
    if config is None:
        raise ValidationFailed(
            f"The file is not a valid agent configuration ({counted(len(findings), 'problem')}).",
            code="invalid_file",
            details=findings,
        )
    return config


@dataclass
class Outcome:
    """What an apply did, beside the plan it carried out."""

    versions: list[dict] = field(default_factory=list)  # {document, number}
    drafts: list[dict] = field(default_factory=list)
    published: list[dict] = field(default_factory=list)  # {environment, document, number}
    requested: list[dict] = field(default_factory=list)  # + approval id
    skipped: list[dict] = field(default_factory=list)  # + reason

    def as_dict(self) -> dict:
        return {
            "versions_created": self.versions,
            "drafts_written": self.drafts,
            "published": self.published,
            "approval_requests": self.requested,
            "skipped": self.skipped,
        }


def config_dry_run(*, agent_key: str, data, actor) -> Plan:
    """The plan, nothing written. 400 (with the plan under `plan`) when it cannot be applied."""
    plan = config_plan(config=config_read(data), agent_key=agent_key, actor=actor)
    _refuse_if_blocked(plan)
    return plan


def _refuse_if_blocked(plan: Plan) -> None:
    if plan.errors:
        raise ValidationFailed(
            f"The file cannot be applied: {counted(len(plan.errors), 'problem')}. Nothing was written.",
            code="invalid_file",
            details=plan.errors,
            extra={"plan": plan.as_dict()},
        )


@service_transaction(durable=True)
def config_apply(
    *, agent_key: str, data, actor, expected_plan: str | None = None
) -> tuple[Plan, Outcome]:
    """Apply the file exactly as its dry run says. With `expected_plan` (the dry run's plan
    hash), refuse (409, nothing written) when the file or the console changed since, so what
    is applied is what was reviewed."""
    plan = config_plan(config=config_read(data), agent_key=agent_key, actor=actor)
    _refuse_if_blocked(plan)
    if expected_plan is not None and expected_plan != plan.plan_hash:
        raise Conflict(
            "The file or this console changed since the dry run; review the new plan and "
            "apply again.",
            code="plan_changed",
            extra={"current": plan.as_dict()},
        )
    agent = Agent.objects.filter(key=agent_key).first()
    if agent is None:
        # The file's own profile (with its name) is created below; an empty one only when
        # the file has none, so the new agent's page opens.
        agent = agent_create(
            key=agent_key,
            name=plan.agent_name,
            description=plan.agent_description,
            with_profile=not any(d.kind == Document.Kind.PROFILE for d in plan.documents),
            actor=actor,
        )
    outcome = Outcome()
    created: dict[str, dict[int, Version]] = {}
    for doc_plan in plan.documents:
        created[doc_plan.key] = _apply_document(agent, doc_plan, actor, outcome)
    environments = {e.key: e for e in Environment.objects.all()}
    reason = f"Configuration imported (file sha256 {plan.file_sha256[:12]})"
    for step in plan.releases:
        where = {"environment": step.environment, "document": step.document}
        if step.action == "skip":
            outcome.skipped.append({**where, "number": step.number, "reason": step.reason})
        if not step.writes:
            continue
        version = created[step.document][step.number]
        result = release_publish(
            version=version,
            environment=environments[step.environment],
            actor=actor,
            reason=reason,
            change_path="import",
        )
        if result.approval is not None or result.change_record is not None:
            outcome.requested.append(
                {
                    **where,
                    "number": step.number,
                    "approval": result.approval.pk if result.approval else None,
                    **(
                        {"change_record": result.change_record.public_id}
                        if result.change_record
                        else {}
                    ),
                }
            )
        else:
            outcome.published.append({**where, "number": step.number})
    audit_record(
        actor=actor,
        action=AuditAction.CONFIG_IMPORT,
        target=agent,
        agent=agent,
        after={"file_sha256": plan.file_sha256, "plan": plan.plan_hash, **outcome.as_dict()},
    )
    return plan, outcome


def _apply_document(agent, doc_plan, actor, outcome: Outcome) -> dict[int, Version]:
    """Create the document, its new versions and its draft; {number here: Version} of every
    version the file's live map may name."""
    document = Document.objects.filter(agent=agent, key=doc_plan.key).first()
    if document is None:
        document = document_create(
            agent=agent, key=doc_plan.key, kind=doc_plan.kind, name=doc_plan.name, actor=actor
        )
    versions = {v.number: v for v in document.versions.filter(state=Version.State.FROZEN)}
    for step in doc_plan.creates:
        draft = draft_create(document=document, body=step.body, note=step.note, actor=actor)
        version = version_freeze(draft=draft, actor=actor)
        if version.number != step.number:  # someone added a version since the plan
            raise Conflict(
                f"{document.key} got a new version meanwhile; plan again.", code="plan_changed"
            )
        versions[version.number] = version
        outcome.versions.append({"document": document.key, "number": version.number})
    draft_step = doc_plan.draft
    if draft_step is not None and draft_step.action == "create":
        draft_create(document=document, body=draft_step.body, note=draft_step.note, actor=actor)
    elif draft_step is not None and draft_step.action == "update":
        open_draft = document.versions.get(state=Version.State.DRAFT)
        draft_update(
            draft=open_draft,
            body=draft_step.body,
            revision=draft_step.revision,
            note=draft_step.note,
            actor=actor,
        )
    if draft_step is not None and draft_step.action in ("create", "update"):
        outcome.drafts.append(
            {"document": document.key, "number": draft_step.number, "action": draft_step.action}
        )
    return versions

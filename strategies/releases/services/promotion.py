"""Promotion: publish to one environment what is live in another, for one document or all of
an agent's, in one transaction — all of it, or nothing when any document fails the publish
judgement."""

from __future__ import annotations

from dataclasses import dataclass, field

from console.kernel.audit import AuditAction, audit_record
from console.kernel.errors import ApplicationError, ValidationFailed
from console.kernel.policy import check_user_can_publish_to
from console.kernel.reasons import reason_clean
from console.kernel.transactions import service_transaction
from console.kernel.wording import counted
from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.releases.models import ApprovalRequest, ChangeRecord, Release
from strategies.releases.selectors import publish_refusals
from strategies.releases.services.checks import publish_refuse
from strategies.releases.services.publish import release_publish
from strategies.releases.services.state import _current


@dataclass(frozen=True)
class PromotionItem:
    """One document of a promotion: what the target had, what the source has, what happened."""

    PUBLISHED = "published"
    REQUESTED = "requested"
    UNCHANGED = "unchanged"

    document: Document
    outcome: str
    from_version: int | None  # live in the target before
    to_version: int | None  # live in the source
    note: str = ""
    release: Release | None = None
    approval: ApprovalRequest | None = None
    change_record: ChangeRecord | None = None  # waits for the external change system


@dataclass(frozen=True)
class PromotionOutcome:
    source: Environment
    target: Environment
    items: list[PromotionItem] = field(default_factory=list)

    @property
    def requested(self) -> list[PromotionItem]:
        return [i for i in self.items if i.outcome == PromotionItem.REQUESTED]

    @property
    def published(self) -> list[PromotionItem]:
        return [i for i in self.items if i.outcome == PromotionItem.PUBLISHED]


def _promotion_refused(source, target, failures: list[tuple[Document, ApplicationError]]):
    lines = [f"{doc.key}: {error.message}" for doc, error in failures]
    details = []
    for doc, error in failures:
        inner = error.details or [{"path": "", "code": error.code, "message": error.message}]
        for detail in inner:
            path = f"documents.{doc.key}" + (f".{detail['path']}" if detail.get("path") else "")
            details.append({**detail, "path": path})
    return ValidationFailed(
        f"Nothing was promoted from {source.key} to {target.key}: "
        f"{counted(len(failures), 'document')} cannot go. " + " ".join(lines),
        code="promotion_refused",
        details=details,
    )


@service_transaction(durable=True)
def release_promote(
    *,
    agent,
    source: Environment,
    target: Environment,
    documents: list[Document] | None = None,
    actor,
    reason: str,
) -> PromotionOutcome:
    """Publish to `target` what is live in `source`, for `documents` (None: all of the agent's),
    in one transaction. Each document whose live version differs goes through the publish's
    checks (target manifest, sensitive sections, approval where protected: one request per
    document). All or nothing: when any document fails a check, nothing is written and every
    failing document is reported with its reasons."""
    check_user_can_publish_to(actor, target, agent)
    if source.pk == target.pk:
        raise ValidationFailed(
            "Choose two different environments to promote between.",
            code="same_environment",
            details=[{"path": "target", "code": "invalid", "message": "Same as the source."}],
        )
    reason = reason_clean(
        reason, ask="Give a reason for the promotion (recorded in the history and audit log)."
    )
    if documents is None:
        documents = list(Document.objects.filter(agent=agent).order_by("kind", "key"))
    plan: list[tuple[Document, Release | None, Release | None]] = []
    failures: list[tuple[Document, ApplicationError]] = []
    for document in documents:
        if document.agent_id != agent.pk:
            raise ValidationFailed(f"{document.key} is not a document of {agent.key}.")
        have, want = _current(document, target), _current(document, source)
        plan.append((document, have, want))
        if want is None or (have is not None and have.version_id == want.version_id):
            continue
        try:
            publish_refuse(
                publish_refusals(version=want.version, environment=target, actor=actor),
                version=want.version,
                environment=target,
                actor=actor,
            )
        except ApplicationError as error:
            failures.append((document, error))
    if failures:
        raise _promotion_refused(source, target, failures)
    items = [
        _promote_one(document, have, want, source, target, actor, reason)
        for document, have, want in plan
    ]
    outcome = PromotionOutcome(source=source, target=target, items=items)
    audit_record(
        actor=actor,
        action=AuditAction.RELEASE_PROMOTE,
        target=(
            "promotion",
            f"{source.key}->{target.key}",
            f"{agent.key}: {source.key} → {target.key}",
        ),
        agent=agent,
        after={
            "source": source.key,
            "target": target.key,
            "reason": reason,
            "documents": {i.document.key: i.outcome for i in items},
        },
    )
    return outcome


def _promote_one(document, have, want, source, target, actor, reason) -> PromotionItem:
    base = {
        "document": document,
        "from_version": have.version.number if have else None,
        "to_version": want.version.number if want else None,
    }
    if want is None:
        return PromotionItem(
            outcome=PromotionItem.UNCHANGED, note=f"Nothing is live in {source.key}.", **base
        )
    if have is not None and have.version_id == want.version_id:
        return PromotionItem(
            outcome=PromotionItem.UNCHANGED, note=f"Already the same in {target.key}.", **base
        )
    published = release_publish(
        version=want.version,
        environment=target,
        actor=actor,
        reason=reason,
        expected_revision=have.revision if have else 0,
        change_path="promotion",
    )
    if published.change_record is not None:
        return PromotionItem(
            outcome=PromotionItem.REQUESTED,
            approval=published.approval,
            change_record=published.change_record,
            note=f"Waits for change record {published.change_record.public_id}.",
            **base,
        )
    if published.approval is not None:
        return PromotionItem(outcome=PromotionItem.REQUESTED, approval=published.approval, **base)
    return PromotionItem(outcome=PromotionItem.PUBLISHED, release=published.release, **base)

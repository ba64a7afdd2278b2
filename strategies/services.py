"""Writes for agents, documents and versions. Each function is one transaction that also
writes its audit row; views, API views and commands call these and never write models.

Lifecycle: a document has at most one draft (database constraint). A draft is edited with
optimistic concurrency on `revision`; `version_freeze` makes it immutable (database trigger).
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone

from console.audit import audit_record
from console.errors import Conflict, ValidationFailed
from strategies import documents
from strategies.models import Document, Version


def _version_state(version: Version) -> dict:
    return {
        "number": version.number,
        "state": version.state,
        "revision": version.revision,
        "content_hash": version.content_hash,
        "note": version.note,
        "body": version.body,
    }


def _check_body(kind: str, body) -> None:
    errors = documents.blocking(documents.validate_document(kind, body))
    if errors:
        raise ValidationFailed("The document has errors.", details=[e.as_dict() for e in errors])


@transaction.atomic
def draft_create(
    *, document: Document, body: dict, actor, note: str = "", parent: Version | None = None
) -> Version:
    """Open the document's draft. Refused with 409 when one is already open."""
    _check_body(document.kind, body)
    if parent is None:
        parent = document.versions.filter(state=Version.State.FROZEN).order_by("-number").first()
    next_number = (document.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    try:
        with transaction.atomic():
            draft = Version.objects.create(
                document=document,
                number=next_number,
                state=Version.State.DRAFT,
                body=body,
                content_hash=documents.content_hash(body),
                parent=parent,
                author=actor if getattr(actor, "is_authenticated", False) else None,
                author_label=getattr(actor, "username", "") or "system",
                note=note,
            )
    except IntegrityError as exc:
        current = document.versions.filter(state=Version.State.DRAFT).first()
        raise Conflict(
            f"{document} already has an open draft (v{current.number if current else '?'}).",
            code="draft_exists",
            extra={"current": _version_state(current) if current else None},
        ) from exc
    audit_record(
        actor=actor,
        action="draft.create",
        target=draft,
        agent=document.agent,
        after=_version_state(draft),
    )
    return draft


@transaction.atomic
def draft_update(
    *, draft: Version, body: dict, revision: int, actor, note: str | None = None
) -> Version:
    """Save a draft if nobody saved it since `revision` was read; else 409 with the current draft."""
    document = draft.document
    _check_body(document.kind, body)
    before = Version.objects.filter(pk=draft.pk).values("body", "note", "revision").first()
    changes = {
        "body": body,
        "content_hash": documents.content_hash(body),
        "revision": F("revision") + 1,
        "updated_at": timezone.now(),
    }
    if note is not None:
        changes["note"] = note
    updated = Version.objects.filter(
        pk=draft.pk, state=Version.State.DRAFT, revision=revision
    ).update(**changes)
    if updated != 1:
        current = Version.objects.filter(pk=draft.pk).first()
        raise Conflict(
            "This draft was changed by someone else since you loaded it. Reload to see their version.",
            code="stale_revision",
            extra={"current": _version_state(current) if current else None},
        )
    draft.refresh_from_db()
    audit_record(
        actor=actor,
        action="draft.update",
        target=draft,
        agent=document.agent,
        before=before,
        after={"body": draft.body, "note": draft.note, "revision": draft.revision},
    )
    return draft


@transaction.atomic
def version_freeze(
    *, draft: Version, actor, revision: int | None = None, note: str | None = None
) -> Version:
    """Make a draft an immutable version. With `revision`, refuses a stale freeze (409)."""
    _check_body(draft.document.kind, draft.body)
    filters = {"pk": draft.pk, "state": Version.State.DRAFT}
    if revision is not None:
        filters["revision"] = revision
    changes = {"state": Version.State.FROZEN, "frozen_at": timezone.now()}
    if note is not None:
        changes["note"] = note
    if Version.objects.filter(**filters).update(**changes) != 1:
        current = Version.objects.filter(pk=draft.pk).first()
        raise Conflict(
            "The draft changed or was already frozen; reload before freezing.",
            code="stale_revision",
            extra={"current": _version_state(current) if current else None},
        )
    draft.refresh_from_db()
    audit_record(
        actor=actor,
        action="version.freeze",
        target=draft,
        agent=draft.document.agent,
        after=_version_state(draft),
    )
    return draft


@transaction.atomic
def draft_discard(*, draft: Version, actor) -> None:
    state = _version_state(draft)
    if Version.objects.filter(pk=draft.pk, state=Version.State.DRAFT).delete()[0] != 1:
        raise Conflict("Only an open draft can be discarded.", code="not_a_draft")
    audit_record(
        actor=actor,
        action="draft.discard",
        target=("strategies.version", draft.pk, str(draft)),
        agent=draft.document.agent,
        before=state,
    )

"""Writes for agents, documents and versions. Each function is one transaction that also
writes its audit row; views, API views and commands call these and never write models.

Lifecycle: a document has at most one draft (database constraint). A draft is edited with
optimistic concurrency on `revision`; `version_freeze` makes it immutable (database trigger).
"""

from __future__ import annotations

import re

from context_runtime import canonical, vocabulary
from django.db.models import F, Subquery, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from console.kernel.audit import AuditAction, actor_label, audit_record
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.limits import MAX_NOTE_CHARS, text_findings, too_large
from console.kernel.policy import check_user_can_enable_sensitive
from console.kernel.transactions import service_transaction
from console.kernel.writes import create_or_refuse, update_or_refuse
from strategies.catalog.models import Agent
from strategies.catalog.selectors import sensitive_paths_added
from strategies.documents.models import Document, Version
from strategies.documents.selectors import document_validate

# A strategy key is a task id the runtime uses: lowercase snake case.
DOCUMENT_KEY = re.compile(r"[a-z][a-z0-9_]{0,99}")
# The wire fields of a manifest (docs/runtime-contract.md §2) that validation uses; `runtime` is stored apart.


def _version_state(version: Version) -> dict:
    return {
        "number": version.number,
        "state": version.state,
        "revision": version.revision,
        "content_hash": version.content_hash,
        "note": version.note,
        "body": version.body,
    }


def _stale_draft(draft: Version, message: str) -> Conflict:
    current = Version.objects.filter(pk=draft.pk).first()
    return Conflict(
        message,
        code="stale_revision",
        extra={"current": _version_state(current) if current else None},
    )


def _check_body(kind: str, body) -> None:
    """The one validator, as the editor and the API show it; 413 for a body over the limit."""
    errors = document_validate(kind=kind, body=body).errors
    if any(e["code"] == "too_large" for e in errors):
        raise too_large("The document", vocabulary.MAX_BODY_BYTES)
    if errors:
        raise ValidationFailed("The document has errors.", details=errors)


def _check_note(note: str | None) -> None:
    """A version's note as every interface must keep it (the API's serializer, the editor,
    an import): no NUL or lone surrogate, at most MAX_NOTE_CHARS — refused at `note`."""
    if note is None:
        return
    findings = text_findings(note, "note", max_chars=MAX_NOTE_CHARS)
    if findings:
        raise ValidationFailed(findings[0].message, details=[f.as_dict() for f in findings])


def _is_person(actor) -> bool:
    return bool(getattr(actor, "is_authenticated", False))


def _check_sensitive(*, document: Document, body, before_bodies: list, actor) -> None:
    """Switching a sensitive section on needs ENABLE_SENSITIVE. Sections already on in the
    parent version or in the saved draft stay allowed, so others can keep editing."""
    if document.kind != vocabulary.PROFILE or not _is_person(actor):
        return  # commands and the demo loader run with the operator's shell access
    paths = sensitive_paths_added(body, baseline=before_bodies)
    check_user_can_enable_sensitive(actor, document.agent, paths)


def _version_number_take(document: Document) -> int:
    """The document's next version number, taken for good: a discarded draft's number is
    never given again. The UPDATE locks the document's row, so two drafts opened at once get
    two numbers (one then meets the open draft and rolls its number back with it); versions
    written past the counter (older rows, fixtures) are stepped over."""
    highest = Version.objects.filter(document=document).order_by("-number").values("number")[:1]
    Document.objects.filter(pk=document.pk).update(
        last_version_number=Greatest(
            F("last_version_number"), Coalesce(Subquery(highest), Value(0))
        )
        + 1
    )
    number = Document.objects.filter(pk=document.pk).values_list("last_version_number", flat=True)[
        0
    ]
    document.last_version_number = number
    return number


@service_transaction
def draft_create(
    *,
    document: Document,
    body: dict,
    actor,
    note: str = "",
    parent: Version | None = None,
    author_label: str = "",
) -> Version:
    """Open the document's draft. Refused with 409 when one is already open."""
    _check_body(document.kind, body)
    _check_note(note)
    if parent is None:
        parent = document.versions.filter(state=Version.State.FROZEN).order_by("-number").first()
    _check_sensitive(
        document=document, body=body, before_bodies=[parent.body] if parent else [], actor=actor
    )
    next_number = _version_number_take(document)

    def draft_exists() -> Conflict:
        current = document.versions.filter(state=Version.State.DRAFT).first()
        return Conflict(
            f"{document} already has an open draft (v{current.number if current else '?'}).",
            code="draft_exists",
            extra={"current": _version_state(current) if current else None},
        )

    draft = create_or_refuse(
        Version,
        draft_exists,
        document=document,
        number=next_number,
        state=Version.State.DRAFT,
        body=body,
        content_hash=canonical.content_hash(body),
        parent=parent,
        author=actor if getattr(actor, "is_authenticated", False) else None,
        author_label=author_label or actor_label(actor),
        note=note,
    )
    audit_record(
        actor=actor,
        action=AuditAction.DRAFT_CREATE,
        target=draft,
        agent=document.agent,
        after=_version_state(draft),
    )
    return draft


@service_transaction
def draft_update(
    *, draft: Version, body: dict, revision: int, actor, note: str | None = None
) -> Version:
    """Save a draft if nobody saved it since `revision` was read; else 409 with the current draft."""
    document = draft.document
    _check_body(document.kind, body)
    _check_note(note)
    before = Version.objects.filter(pk=draft.pk).values("body", "note", "revision").first()
    earlier = [before["body"]] if before else []
    if draft.parent_id:
        earlier.append(Version.objects.get(pk=draft.parent_id).body)
    _check_sensitive(document=document, body=body, before_bodies=earlier, actor=actor)
    changes = {
        "body": body,
        "content_hash": canonical.content_hash(body),
        "revision": F("revision") + 1,
        "updated_at": timezone.now(),
    }
    if note is not None:
        changes["note"] = note
    update_or_refuse(
        Version.objects.filter(pk=draft.pk, state=Version.State.DRAFT, revision=revision),
        lambda: _stale_draft(
            draft,
            "This draft was changed by someone else since you loaded it. "
            "Reload to see their version.",
        ),
        **changes,
    )
    draft.refresh_from_db()
    audit_record(
        actor=actor,
        action=AuditAction.DRAFT_UPDATE,
        target=draft,
        agent=document.agent,
        before=before,
        after={"body": draft.body, "note": draft.note, "revision": draft.revision},
    )
    return draft


@service_transaction
def version_freeze(
    *, draft: Version, actor, revision: int | None = None, note: str | None = None
) -> Version:
    """Make a draft an immutable version. With `revision`, refuses a stale freeze (409)."""
    _check_body(draft.document.kind, draft.body)
    _check_note(note)
    filters = {"pk": draft.pk, "state": Version.State.DRAFT}
    if revision is not None:
        filters["revision"] = revision
    changes = {"state": Version.State.FROZEN, "frozen_at": timezone.now()}
    if note is not None:
        changes["note"] = note
    update_or_refuse(
        Version.objects.filter(**filters),
        lambda: _stale_draft(draft, "The draft changed or was already frozen; reload first."),
        **changes,
    )
    draft.refresh_from_db()
    audit_record(
        actor=actor,
        action=AuditAction.VERSION_FREEZE,
        target=draft,
        agent=draft.document.agent,
        after=_version_state(draft),
    )
    return draft


@service_transaction(durable=True)
def draft_discard(*, draft: Version, actor) -> None:
    state = _version_state(draft)
    if Version.objects.filter(pk=draft.pk, state=Version.State.DRAFT).delete()[0] != 1:
        raise Conflict("Only an open draft can be discarded.", code="not_a_draft")
    audit_record(
        actor=actor,
        action=AuditAction.DRAFT_DISCARD,
        target=("strategies.version", draft.pk, str(draft)),
        agent=draft.document.agent,
        before=state,
    )


@service_transaction
def document_create(
    *, agent: Agent, key: str, kind: str = Document.Kind.STRATEGY, name: str = "", actor
) -> Document:
    """Add a strategy (or the profile) to an agent. Its first draft is opened separately."""
    key = (key or "").strip()
    if kind == Document.Kind.PROFILE:
        key = Document.PROFILE_KEY
    if kind not in Document.Kind.values:
        raise ValidationFailed(
            "Unknown document kind.",
            details=[
                {"path": "kind", "code": "invalid_choice", "message": "Use strategy or profile."}
            ],
        )
    if not DOCUMENT_KEY.fullmatch(key) or (
        kind == Document.Kind.STRATEGY and key == Document.PROFILE_KEY
    ):
        raise ValidationFailed(
            "That key cannot name a strategy.",
            details=[
                {
                    "path": "key",
                    "code": "invalid",
                    "message": "Use lowercase letters, digits and underscores, e.g. "
                    "after_sales_consultation ('profile' is reserved).",
                }
            ],
        )
    if Document.objects.filter(agent=agent, key=key).exists():
        raise Conflict(f"{agent.key} already has a document named {key}.", code="document_exists")
    document = Document.objects.create(agent=agent, kind=kind, key=key, name=name or key)
    audit_record(
        actor=actor,
        action=AuditAction.DOCUMENT_CREATE,
        target=document,
        agent=agent,
        after={"key": key, "kind": kind, "name": document.name},
    )
    return document


# --- what the catalog asks (catalog.dependents) ---------------------------------------------------
def profile_create(*, agent: Agent, actor) -> Document:
    """A new agent's context profile: a document without versions yet, so the agent's page
    opens at once. Inside the catalog's agent_create, whose transaction it shares."""
    profile = Document.objects.create(
        agent=agent, kind=Document.Kind.PROFILE, key=Document.PROFILE_KEY, name="Context profile"
    )
    audit_record(
        actor=actor,
        action=AuditAction.DOCUMENT_CREATE,
        target=profile,
        agent=agent,
        after={"key": profile.key, "kind": profile.kind, "name": profile.name},
    )
    return profile


def documents_delete_with_agent(*, agent: Agent) -> None:
    """An agent deleted by mistake takes its drafts and documents along (inside the catalog's
    agent_delete, which first refused the delete if any version is frozen)."""
    Version.objects.filter(document__agent=agent, state=Version.State.DRAFT).delete()
    Document.objects.filter(agent=agent).delete()

"""Test data for access and audit tests: profile edits through the real services, and the
users of the access matrix."""

from __future__ import annotations

import copy

from console.demo import data

SAMPLE_AGENT = "assistant_professional"
OTHER_AGENT = "assistant_lite"


def profile_edit(actor, *, toggle: tuple[str, str, bool], note: str = "") -> object:
    """Edit the Bank profile as `actor` the way the editor does (open a draft from the
    latest version, save it, freeze it): one sections toggle (block, section, value).
    Returns the frozen version."""
    from strategies.documents.models import Document, Version
    from strategies.documents.services import draft_create, draft_update, version_freeze

    document = Document.objects.get(agent__key=SAMPLE_AGENT, key=Document.PROFILE_KEY)
    draft = document.versions.filter(state=Version.State.DRAFT).first()
    if draft is None:
        latest = document.versions.filter(state=Version.State.FROZEN).order_by("-number").first()
        body = copy.deepcopy(latest.body if latest else data.BANK_PROFILE)
        draft = draft_create(document=document, body=body, actor=actor, note=note)
    body = copy.deepcopy(draft.body)
    block, section, value = toggle
    body["sections"][block][section] = value
    draft = draft_update(draft=draft, body=body, revision=draft.revision, actor=actor, note=note)
    return version_freeze(draft=draft, actor=actor)

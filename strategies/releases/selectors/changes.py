"""Reads of external change records (issue 34 item 1, docs/change-approvals.md): an
environment's change system, and the approved, unexpired record of a content that the go-live
judgement asks for. Beneath `golive`."""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from strategies.releases.models import ChangeRecord, ChangeSystem

# The paths whose go-live needs a change record where the environment requires one; the
# others are the rollout's later moves (its start needed one) and the emergency moves back.
CHANGE_RECORD_PATHS = frozenset({"publish", "approval", "rollout_start"})


def change_system_of(environment) -> ChangeSystem | None:
    """The environment's change system, if one is configured (read once per environment)."""
    cached = getattr(environment, "_change_system_cache", False)
    if cached is not False:
        return cached
    system = ChangeSystem.objects.filter(environment_id=environment.pk).first()
    environment._change_system_cache = system
    return system


def requires_change_record(environment) -> bool:
    system = change_system_of(environment)
    return system is not None and system.requires_change_record


def change_record_usable(*, environment, content_hash: str, at=None) -> ChangeRecord | None:
    """The approved record of this content here whose window is still open: the one thing
    that lets a go-live pass where the environment requires a change record."""
    return (
        ChangeRecord.objects.filter(
            environment_id=environment.pk,
            content_hash=content_hash,
            state=ChangeRecord.State.APPROVED,
            valid_until__gt=at or timezone.now(),
        )
        .order_by("-decided_at", "-pk")
        .first()
    )


def change_record_waiting(*, environment, document, content_hash: str) -> ChangeRecord | None:
    return ChangeRecord.objects.filter(
        environment_id=environment.pk,
        document=document,
        content_hash=content_hash,
        state=ChangeRecord.State.WAITING,
    ).first()


def change_record_latest(*, environment, document, content_hash: str) -> ChangeRecord | None:
    """The newest record of this content here, whatever its state (what the pages show)."""
    return (
        ChangeRecord.objects.filter(
            environment_id=environment.pk, document=document, content_hash=content_hash
        )
        .order_by("-created_at", "-pk")
        .first()
    )


def change_records_for(*, agents=None, environment=None, limit: int = 50):
    """Recent records, newest first, of `agents` (all when None): the environment's
    change-system page, the API list."""
    records = ChangeRecord.objects.select_related(
        "environment", "document__agent", "version", "release_event"
    )
    if agents is not None:
        records = records.filter(document__agent__in=agents)
    if environment is not None:
        records = records.filter(environment=environment)
    return records.order_by("-created_at", "-pk")[:limit]


def change_records_to_poll():
    """Waiting records whose change system has a status URL (the beat polls them)."""
    return (
        ChangeRecord.objects.filter(state=ChangeRecord.State.WAITING)
        .filter(~Q(environment__change_system__status_url_template=""))
        .select_related("environment__change_system")
        .order_by("pk")
    )


def change_record_by_event(event_ids) -> dict[int, ChangeRecord]:
    """The record each release event went live on (the history shows its change number)."""
    return {
        record.release_event_id: record
        for record in ChangeRecord.objects.filter(release_event_id__in=list(event_ids))
    }

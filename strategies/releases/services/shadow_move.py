"""The one way a shadow changes: `_shadow_move` starts one (a version) or stops it (None), a
conditional UPDATE on the shadow's revision (or, for the first start here, an INSERT guarded
by the unique constraint). Of two concurrent changes exactly one wins; the other gets 409
with the current shadow. Each winning change appends one ReleaseEvent (`shadow_start`,
`shadow_stop`) with the shadow revision it produced and writes its audit row; the caller
re-renders the runtime payload once and then sends the webhook (`_shadow_notify`)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F
from django.utils import timezone

from console.kernel.audit import AuditAction, actor_label, audit_record
from console.kernel.errors import Conflict
from console.kernel.writes import create_or_refuse, update_or_refuse
from strategies.catalog.models import Environment
from strategies.documents.models import Document, Version
from strategies.releases.models import Release, ReleaseEvent, ShadowRelease
from strategies.releases.selectors import SHADOW_RUNNING, STALE_REVISION
from strategies.releases.services.notifications import _notify_shadow
from strategies.releases.services.state import _shadow_current, shadow_conflict, shadow_state
from strategies.releases.transitions import shadow_allows

NO_SHADOW = "no_shadow"
# Each shadow event of the release history, and the audit action it is written as.
SHADOW_ACTIONS = {
    ReleaseEvent.Action.SHADOW_START: AuditAction.SHADOW_START,
    ReleaseEvent.Action.SHADOW_STOP: AuditAction.SHADOW_STOP,
}


@dataclass(frozen=True)
class ShadowChange:
    """What one shadow move did, for the webhook sent once the payload is rendered."""

    shadow: ShadowRelease
    action: str  # ReleaseEvent.Action.SHADOW_START or SHADOW_STOP
    version: Version  # started, or stopped
    live: Release
    when: object


def _lost_race(document, environment, starting: bool) -> Conflict:
    """Why the conditional write matched nothing, read again: another shadow started (a
    start), none runs any more (a stop), or the revision moved on."""
    current = _shadow_current(document, environment)
    if starting and not shadow_allows(current, "start"):
        message = (
            f"{document.key} v{current.version.number} already runs as shadow in "
            f"{environment.key} (started by {current.started_by or 'someone'} just now)."
        )
        return shadow_conflict(document, environment, message, code=SHADOW_RUNNING)
    if not starting and not shadow_allows(current, "stop"):
        message = f"No shadow of {document.key} runs in {environment.key} any more."
        return shadow_conflict(document, environment, message, code=NO_SHADOW)
    return shadow_conflict(
        document,
        environment,
        f"The shadow of {document.key} in {environment.key} changed since you loaded it. "
        "Reload and decide again.",
        code=STALE_REVISION,
    )


def _shadow_move(
    *,
    document: Document,
    environment: Environment,
    live: Release,
    to_version: Version | None,
    actor,
    reason: str,
    expected_revision: int | None,
) -> ShadowChange:
    """Start `to_version` as shadow beside `live`, or stop the shadow (None). The caller
    judged it (`shadow_refusals`, or the rights for a stop); this makes it true or refuses."""
    label = actor_label(actor)
    starting = to_version is not None
    before = _shadow_current(document, environment)
    before_state = shadow_state(before, document=document, environment=environment)
    now = timezone.now()
    if before is None:
        if not starting or expected_revision not in (None, 0):
            raise _lost_race(document, environment, starting)
        create_or_refuse(
            ShadowRelease,
            lambda: _lost_race(document, environment, starting),
            document=document,
            environment=environment,
            version=to_version,
            revision=1,
            started_by=label,
            started_at=now,
        )
    else:
        expected = before.revision if expected_revision is None else expected_revision
        update_or_refuse(
            # A start only where none runs, a stop only where one runs: the database decides.
            ShadowRelease.objects.filter(pk=before.pk, revision=expected, version__isnull=starting),
            lambda: _lost_race(document, environment, starting),
            version=to_version,
            revision=F("revision") + 1,
            started_by=label if starting else "",
            started_at=now if starting else None,
            updated_at=now,
        )
    shadow = _shadow_current(document, environment)
    action = ReleaseEvent.Action.SHADOW_START if starting else ReleaseEvent.Action.SHADOW_STOP
    version = to_version if starting else before.version
    ReleaseEvent.objects.create(
        release=live,
        revision=shadow.revision,
        action=action,
        to_version=version,
        actor=label,
        reason=reason,
    )
    audit_record(
        actor=actor,
        action=SHADOW_ACTIONS[action],
        target=shadow,
        agent=document.agent,
        before=before_state,
        after={
            **shadow_state(shadow),
            "reason": reason,
            "live_version": live.version.number,
            **({} if starting else {"stopped_version": version.number}),
        },
    )
    return ShadowChange(shadow=shadow, action=action, version=version, live=live, when=now)


def _shadow_notify(change: ShadowChange, *, etag: str, actor) -> None:
    _notify_shadow(
        change.shadow,
        action="start" if change.action == ReleaseEvent.Action.SHADOW_START else "stop",
        version=change.version.number,
        live_version=change.live.version.number,
        etag=etag,
        when=change.when,
        actor=actor,
    )

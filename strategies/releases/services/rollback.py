"""Rollback: back to a version that was live in the environment before — an immediate rollback
(the emergency action, at once even where protected), or an approval request when the
environment's revert policy asks for a second person. Both as the go-live judgement says
(`golive.Path.ROLLBACK`)."""

from __future__ import annotations

from console.kernel.audit import actor_label
from console.kernel.policy import check_user_can_request_rollback
from console.kernel.reasons import reason_clean
from console.kernel.transactions import service_transaction
from strategies.documents.models import Version
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent
from strategies.releases.selectors.golive import (
    APPROVAL_REQUIRED,
    Candidate,
    Path,
    go_live_refusals,
)
from strategies.releases.services.approvals import _approval_create
from strategies.releases.services.checks import check_rollback_target
from strategies.releases.services.move import _release_move
from strategies.releases.services.publish import PublishOutcome
from strategies.releases.services.state import _current, _stale


@service_transaction(durable=True)
def release_rollback(
    *,
    release: Release,
    to_version: Version,
    actor,
    reason: str,
    expected_revision: int | None = None,
) -> PublishOutcome:
    """An immediate rollback: back to an earlier live version at once, even in protected
    environments — unless the environment's revert policy asks for a second person: then the rollback is an
    approval request bound to `to_version` and the live revision, like a protected publish."""
    return _release_rollback(
        release=release,
        to_version=to_version,
        actor=actor,
        reason=reason,
        expected_revision=expected_revision,
    )


def _release_rollback(
    *,
    release: Release,
    to_version: Version,
    actor,
    reason: str,
    expected_revision: int | None = None,
    evidence: dict | None = None,
) -> PublishOutcome:
    """The rollback inside the caller's transaction (`release_rollback`, and the one-click
    rollback from a watch warning, `rollout_watch_rollback`, which adds the warning's
    `evidence` to the audit row)."""
    agent = release.document.agent
    judged = go_live_refusals(
        Path.ROLLBACK,
        Candidate.of(to_version),
        environment=release.environment,
        actor=actor,
        live=release,
    )
    needs_approval = any(finding.code == APPROVAL_REQUIRED for finding in judged)
    check_user_can_request_rollback(actor, agent, target=release)
    reason = reason_clean(
        reason, ask="Give a reason for the rollback (recorded in the history and the audit log)."
    )
    check_rollback_target(release=release, to_version=to_version)
    if needs_approval:
        live = _current(release.document, release.environment)
        if expected_revision is not None and live.revision != expected_revision:
            raise _stale(
                release.document, release.environment, "The release changed since you loaded it."
            )
        return PublishOutcome(
            approval=_approval_create(
                version=to_version,
                environment=release.environment,
                live=live,
                actor=actor,
                reason=reason,
                kind=ApprovalRequest.Kind.ROLLBACK,
            )
        )
    return PublishOutcome(
        release=_release_move(
            document=release.document,
            environment=release.environment,
            to_version=to_version,
            action=ReleaseEvent.Action.ROLLBACK,
            actor=actor,
            actor_label=actor_label(actor),
            reason=reason,
            expected_revision=expected_revision,
            evidence=evidence,
        )
    )

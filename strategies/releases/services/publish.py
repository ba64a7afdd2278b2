"""Publishing a version to an environment: live at once, or — where the environment is
protected — an approval request for a second person; where the environment requires an
external change record and none is approved for this content, the change request is sent and
the go-live waits for it (both, where both are asked). What it refuses is the publish
judgement's (`selectors.publish_refusals`), raised by `checks.publish_refuse`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from console.kernel.audit import actor_label
from console.kernel.errors import ValidationFailed
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from strategies.documents.models import Version
from strategies.documents.services import version_freeze
from strategies.releases.models import ApprovalRequest, ChangeRecord, Release, ReleaseEvent
from strategies.releases.selectors import (
    APPROVAL_REQUIRED,
    CHANGE_RECORD_REQUIRED,
    PREVIEW_FEW_TRACES,
    REPLACES_REQUEST,
    pending_for,
    publish_refusals,
    replaced_by_new_request,
)
from strategies.releases.services.approvals import _approval_create, _approval_withdraw
from strategies.releases.services.change_records import _change_record_request
from strategies.releases.services.checks import publish_refuse
from strategies.releases.services.move import _release_move
from strategies.releases.services.state import _current


@dataclass(frozen=True)
class PublishOutcome:
    """What a publish or a rollback did: went live, or waits for a second person."""

    release: Release | None = None  # set when the version went live
    approval: ApprovalRequest | None = None  # set when it waits for a second person
    replaced: ApprovalRequest | None = None  # the person's own older request it withdrew
    change_record: ChangeRecord | None = None  # set when it waits for the change system


@service_transaction
def release_publish(
    *,
    version: Version,
    environment: Environment,
    actor,
    reason: str = "",
    expected_revision: int | None = None,
    at: datetime | None = None,
    change_path: str = ChangeRecord.Path.PUBLISH,
) -> PublishOutcome:
    """Put `version` live in `environment` — or, in a protected environment, ask for approval.

    A draft is frozen first. The version is validated against the environment's latest
    manifest; anything the runtime cannot serve blocks the publish with the reasons. `at`:
    when it happened, for loading a recorded history (the demo's); now unless given.
    `change_path`: what the change request says this go-live is (a promotion, an import).
    """

    document = version.document
    refusals = publish_refusals(
        version=version, environment=environment, actor=actor, expected_revision=expected_revision
    )
    publish_refuse(refusals, version=version, environment=environment, actor=actor)
    few = next((f for f in refusals if f.code == PREVIEW_FEW_TRACES), None)
    if few is not None and not reason.strip():
        # The environment requires a preview and the one there is covered few traces: allowed,
        # with a reason (kept in the release's audit row).
        raise ValidationFailed(
            few.message,
            code=PREVIEW_FEW_TRACES,
            details=[{"path": "reason", "code": PREVIEW_FEW_TRACES, "message": few.message}],
        )
    if version.is_draft:
        version = version_freeze(draft=version, actor=actor)
    replaced = None
    if any(finding.code == REPLACES_REQUEST for finding in refusals):
        # The person's own older request gives way to this one (the judgement said so), read
        # again: one decided since waits no more (nothing to withdraw), and one decided from
        # now on is refused by the withdrawal itself (409 already_decided).
        waiting = pending_for(document=document, environment=environment)
        if replaced_by_new_request(waiting, actor, version.number):
            replaced = _approval_withdraw(
                waiting, actor=actor, reason=f"Replaced by a request for v{version.number}."
            )
    needs_change_record = any(finding.code == CHANGE_RECORD_REQUIRED for finding in refusals)
    approval = None
    if any(finding.code == APPROVAL_REQUIRED for finding in refusals):
        approval = _approval_create(
            version=version,
            environment=environment,
            live=_current(document, environment),
            actor=actor,
            reason=reason,
            at=at,
        )
    if needs_change_record:
        # Asked beside the second person, never instead: both must hold, in either order.
        record = _change_record_request(
            version=version,
            environment=environment,
            actor=actor,
            path=change_path,
            reason=reason,
            approval=approval,
        )
        return PublishOutcome(replaced=replaced, approval=approval, change_record=record)
    if approval is not None:
        return PublishOutcome(replaced=replaced, approval=approval)
    release = _release_move(
        document=document,
        environment=environment,
        to_version=version,
        action=ReleaseEvent.Action.PUBLISH,
        actor=actor,
        actor_label=actor_label(actor),
        reason=reason,
        expected_revision=expected_revision,
        at=at,
    )
    return PublishOutcome(release=release)

"""Writes for releases, by job: `publish` (live at once, or an approval request where the
environment is protected), `approvals` (approve, reject, withdraw), `rollback`, `promotion`,
`shadow` (start, stop, promote a shadow release), `rollout` (staged rollouts: start, pause,
resume, advance, finish, stop), `rollout_guards` (what the guards do), `rollout_watch` (the
paired watch after completion), over `rollout_steps` (each move asks the go-live judgement
again). Each is one transaction with its audit
rows; the outermost are durable.

Beneath them: `move` (the one way a release pointer moves), `shadow_move` (the one way a
shadow changes), `checks` (the refusals, raised
from the publish judgement in `strategies.releases.selectors`), `state` (releases and requests
as the API and the audit show them) and `notifications` (the webhooks a change sends).
Import from here: `from strategies.releases.services import release_publish`.
"""

from strategies.releases.services.approvals import (
    approval_approve,
    approval_reject,
    approval_withdraw,
)
from strategies.releases.services.checks import check_approved_go_live, check_rollback_target
from strategies.releases.services.notifications import approval_url
from strategies.releases.services.promotion import (
    PromotionItem,
    PromotionOutcome,
    release_promote,
)
from strategies.releases.services.publish import PublishOutcome, release_publish
from strategies.releases.services.rollback import release_rollback
from strategies.releases.services.rollout import (
    ROLLOUT_OPERATOR_ACTIONS,
    default_plan,
    rollout_advance,
    rollout_finish,
    rollout_pause,
    rollout_resume,
    rollout_start,
    rollout_stop,
)
from strategies.releases.services.rollout_guards import (
    rollout_guard_pause,
    rollout_guard_rollback,
    rollout_record_guards,
    rollout_step_done,
    rollout_step_extend,
)
from strategies.releases.services.rollout_watch import (
    rollout_record_watch_guards,
    rollout_watch_end,
    rollout_watch_rollback,
    rollout_watch_warn,
)
from strategies.releases.services.shadow import shadow_promote, shadow_start, shadow_stop
from strategies.releases.services.state import (
    approval_state,
    release_state,
    rollout_evidence_look,
    rollout_state,
    shadow_state,
)

__all__ = [
    "ROLLOUT_OPERATOR_ACTIONS",
    "PromotionItem",
    "PromotionOutcome",
    "PublishOutcome",
    "approval_approve",
    "approval_reject",
    "approval_state",
    "approval_url",
    "approval_withdraw",
    "check_approved_go_live",
    "check_rollback_target",
    "default_plan",
    "release_promote",
    "release_publish",
    "release_rollback",
    "release_state",
    "rollout_advance",
    "rollout_evidence_look",
    "rollout_finish",
    "rollout_guard_pause",
    "rollout_guard_rollback",
    "rollout_pause",
    "rollout_record_guards",
    "rollout_record_watch_guards",
    "rollout_resume",
    "rollout_start",
    "rollout_state",
    "rollout_step_done",
    "rollout_step_extend",
    "rollout_stop",
    "rollout_watch_end",
    "rollout_watch_rollback",
    "rollout_watch_warn",
    "shadow_promote",
    "shadow_start",
    "shadow_state",
    "shadow_stop",
]

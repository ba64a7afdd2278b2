"""Operator API for releases, approvals and promotions (/api/v1/), by job: `grid` (what is
live), `history`, `publish` (publish and rollback), `shadow`, `promotion`, `approvals` and
`rollouts`; `common` holds what they share. Thin: parse strictly, ask the policy
(`@requires`), call the same services as the pages, answer. A change that went live answers
200 with the release; one that waits for a second person 202 with the request. Errors come out
in the shared shape (console/kernel/errors.py).

The URL map (`strategies/releases/api_urls.py`) names the operations from here:
`api.release_publish`.
"""

from strategies.releases.api.approvals import (
    APPROVERS,
    VIEWERS,
    approval_approve,
    approval_detail,
    approval_list,
    approval_reject,
    approval_withdraw,
)
from strategies.releases.api.common import BODY_LIMIT, READ_ERRORS, TAGS, WRITE_ERRORS
from strategies.releases.api.grid import release_list
from strategies.releases.api.history import release_history
from strategies.releases.api.promotion import release_promote
from strategies.releases.api.publish import release_publish, release_rollback
from strategies.releases.api.rollouts import (
    ROLLOUT_ACTIONS,
    ROLLOUT_ERRORS,
    rollout_action,
    rollout_detail,
    rollout_list,
    rollout_start,
    rollout_watch_rollback,
)
from strategies.releases.api.shadow import SHADOW_ERRORS, shadow_promote, shadow_start, shadow_stop

__all__ = [
    "APPROVERS",
    "BODY_LIMIT",
    "READ_ERRORS",
    "ROLLOUT_ACTIONS",
    "ROLLOUT_ERRORS",
    "SHADOW_ERRORS",
    "TAGS",
    "VIEWERS",
    "WRITE_ERRORS",
    "approval_approve",
    "approval_detail",
    "approval_list",
    "approval_reject",
    "approval_withdraw",
    "release_history",
    "release_list",
    "release_promote",
    "release_publish",
    "release_rollback",
    "rollout_action",
    "rollout_detail",
    "rollout_list",
    "rollout_start",
    "rollout_watch_rollback",
    "shadow_promote",
    "shadow_start",
    "shadow_stop",
]

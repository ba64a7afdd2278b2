"""Release pages, by job: `overview` (the documents × environments grid), `publishing`,
`rollbacks`, `scheduling` (a go-live scheduled for a time), `calendar` (an environment's
freezes, change hours and freeze break-glass), `shadows` (start, stop, promote a shadow
release), `approvals`, `timeline` (the history), `promotion` and `rollouts` (staged rollouts,
the paired watch's rollback); `lookups` holds what they share (the URL's document, environment
and version, the confirm dialog's fields, the page or its preview). The modules are named
apart from the views they hold, so `views.publish` is the view.

The URL map (`strategies/releases/urls.py`) names the views from here: `views.publish`.
"""

from strategies.releases.views.approvals import approval_decide, approval_detail, approval_withdraw
from strategies.releases.views.calendar import (
    calendar_break_glass_end,
    calendar_break_glass_start,
    calendar_freeze_add,
    calendar_freeze_remove,
    calendar_hours_set,
    calendar_page,
)
from strategies.releases.views.overview import overview
from strategies.releases.views.promotion import promote
from strategies.releases.views.publishing import publish
from strategies.releases.views.rollbacks import rollback
from strategies.releases.views.rollouts import (
    PLAN_TEMPLATES,
    ROLLOUT_ACTIONS,
    ROLLOUT_DONE,
    rollout_act,
    rollout_by_key,
    rollout_page,
    rollout_start,
    rollout_watch_rollback,
)
from strategies.releases.views.scheduling import schedule_cancel
from strategies.releases.views.shadows import shadow, shadow_promote, shadow_stop
from strategies.releases.views.timeline import history

__all__ = [
    "PLAN_TEMPLATES",
    "ROLLOUT_ACTIONS",
    "ROLLOUT_DONE",
    "approval_decide",
    "approval_detail",
    "approval_withdraw",
    "calendar_break_glass_end",
    "calendar_break_glass_start",
    "calendar_freeze_add",
    "calendar_freeze_remove",
    "calendar_hours_set",
    "calendar_page",
    "history",
    "overview",
    "promote",
    "publish",
    "rollback",
    "rollout_act",
    "rollout_by_key",
    "rollout_page",
    "rollout_start",
    "rollout_watch_rollback",
    "schedule_cancel",
    "shadow",
    "shadow_promote",
    "shadow_stop",
]

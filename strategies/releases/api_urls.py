"""Operator API for releases and approvals: /api/v1/… (see strategies.releases.api)."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import PUBLIC, Capability, Everywhere
from strategies.releases import api
from strategies.releases.api import changes as change_api
from strategies.releases.api import schedules

AGENT = "agents/<slug:agent>/"
RELEASE = AGENT + "documents/<slug:document>/releases/<slug:environment>/"
ROLLOUT = AGENT + "rollouts/ro-<int:pk>/"  # a rollout's public id is ro-<pk>
CALENDAR = "environments/<slug:environment>/calendar/"

urlpatterns = [
    path(AGENT + "releases/", api.release_list, name="api-release-list"),
    path(AGENT + "releases/history/", api.release_history, name="api-release-history"),
    path(RELEASE, api.release_publish, name="api-release-publish"),
    path(RELEASE + "rollback/", api.release_rollback, name="api-release-rollback"),
    path(RELEASE + "shadow/", api.shadow_start, name="api-release-shadow-start"),
    path(RELEASE + "shadow/stop/", api.shadow_stop, name="api-release-shadow-stop"),
    path(RELEASE + "shadow/promote/", api.shadow_promote, name="api-release-shadow-promote"),
    path(AGENT + "promote/", api.release_promote, name="api-release-promote"),
    path(RELEASE + "rollout/", api.rollout_start, name="api-rollout-start"),
    path(AGENT + "rollouts/", api.rollout_list, name="api-rollout-list"),
    path(ROLLOUT, api.rollout_detail, name="api-rollout-detail"),
    path(
        ROLLOUT + "watch-rollback/",
        api.rollout_watch_rollback,
        name="api-rollout-watch-rollback",
    ),
    *(
        path(
            ROLLOUT + f"{action}/",
            api.rollout_action,
            {"action": action},
            name=f"api-rollout-{action}",
        )
        for action in api.ROLLOUT_ACTIONS
    ),
    # Scheduled go-lives and an environment's calendar (docs/schedules-and-freezes.md)
    path(RELEASE + "schedule/", schedules.schedule_create, name="api-schedule-create"),
    path(AGENT + "schedules/", schedules.schedule_list, name="api-schedule-list"),
    path(
        AGENT + "schedules/<int:pk>/cancel/", schedules.schedule_cancel, name="api-schedule-cancel"
    ),
    path(CALENDAR, schedules.calendar_detail, name="api-calendar"),
    path(CALENDAR + "freezes/", schedules.freeze_window_create, name="api-freeze-create"),
    path(CALENDAR + "freezes/<int:pk>/", schedules.freeze_window_delete, name="api-freeze-delete"),
    path(CALENDAR + "change-hours/", schedules.change_hours_put, name="api-change-hours"),
    path(
        CALENDAR + "break-glass/", schedules.freeze_break_glass_start, name="api-freeze-break-glass"
    ),
    path(
        CALENDAR + "break-glass/end/",
        schedules.freeze_break_glass_end,
        name="api-freeze-break-glass-end",
    ),
    path("approvals/", api.approval_list, name="api-approval-list"),
    path("approvals/<int:pk>/", api.approval_detail, name="api-approval-detail"),
    path("approvals/<int:pk>/approve/", api.approval_approve, name="api-approval-approve"),
    path("approvals/<int:pk>/reject/", api.approval_reject, name="api-approval-reject"),
    path("approvals/<int:pk>/withdraw/", api.approval_withdraw, name="api-approval-withdraw"),
    # External change approvals (docs/change-approvals.md)
    path(
        "environments/<slug:environment>/change-system/",
        change_api.change_system,
        name="api-change-system",
    ),
    path("change-records/", change_api.change_record_list, name="api-change-record-list"),
    path(
        "change-records/<int:pk>/", change_api.change_record_detail, name="api-change-record-detail"
    ),
    path(
        "change-records/<int:pk>/callback",
        change_api.change_record_callback,
        name="api-change-record-callback",
    ),
]

# Publish, promote and shadows: the service checks the right to publish to the environment
# (a protected one takes the right to request). Approval writes: the service checks the agent
# of the request (404 out of scope, 403 without APPROVE or for one's own request).
REQUIRED = {
    # Scheduling: the service checks the right to publish there; cancelling: the requester
    # or an admin. The calendar: seen by anyone who sees an agent, changed by admins.
    "api-schedule-create": Capability.VIEW_CONFIG,
    "api-schedule-list": Capability.VIEW_CONFIG,
    "api-schedule-cancel": Capability.VIEW_CONFIG,
    "api-calendar": Capability.VIEW_CONFIG,
    "api-freeze-create": Everywhere(Capability.MANAGE_CATALOG),
    "api-freeze-delete": Everywhere(Capability.MANAGE_CATALOG),
    "api-change-hours": Everywhere(Capability.MANAGE_CATALOG),
    "api-freeze-break-glass": Everywhere(Capability.MANAGE_CATALOG),
    "api-freeze-break-glass-end": Everywhere(Capability.MANAGE_CATALOG),
    "api-release-list": Capability.VIEW_CONFIG,
    "api-release-history": Capability.VIEW_CONFIG,
    "api-release-publish": Capability.VIEW_CONFIG,
    "api-release-rollback": Capability.ROLLBACK,
    "api-release-promote": Capability.VIEW_CONFIG,
    "api-release-shadow-start": Capability.VIEW_CONFIG,
    "api-release-shadow-stop": Capability.VIEW_CONFIG,
    "api-release-shadow-promote": Capability.VIEW_CONFIG,
    # Rollouts: the service checks the right to publish there (stop: or to roll back).
    "api-rollout-start": Capability.VIEW_CONFIG,
    "api-rollout-list": Capability.VIEW_CONFIG,
    "api-rollout-detail": Capability.VIEW_CONFIG,
    "api-rollout-watch-rollback": Capability.ROLLBACK,
    **{f"api-rollout-{action}": Capability.VIEW_CONFIG for action in api.ROLLOUT_ACTIONS},
    "api-approval-list": Capability.VIEW_CONFIG,
    "api-approval-detail": Capability.VIEW_CONFIG,
    "api-approval-approve": Capability.APPROVE,
    "api-approval-reject": Capability.APPROVE,
    "api-approval-withdraw": Capability.VIEW_CONFIG,
    # An environment's change system is its settings; records are read where the agent is seen.
    "api-change-system": Everywhere(Capability.MANAGE_CATALOG),
    "api-change-record-list": Capability.VIEW_CONFIG,
    "api-change-record-detail": Capability.VIEW_CONFIG,
    # The change system's answer: no session, its signature is its authentication.
    "api-change-record-callback": PUBLIC,
}

"""Release pages (/releases/)."""

from django.urls import path

from console.kernel.policy import AUTHENTICATED, Capability, Everywhere
from strategies.releases import views
from strategies.releases.views import changes as change_views

_DOC_ENV = "releases/<slug:agent>/<slug:document>/<slug:environment>"
_ROLLOUT = "releases/<slug:agent>/rollouts/ro-<int:pk>/"
_CALENDAR = "catalog/environments/<slug:environment>/calendar/"

urlpatterns = [
    path("releases/", views.overview, name="release-overview"),
    # An environment's external change system (its settings, beside the environment's own)
    path(
        "catalog/environments/<slug:environment>/change-system/",
        change_views.change_system,
        name="change-system",
    ),
    path(f"{_DOC_ENV}/publish/", views.publish, name="release-publish"),
    path(f"{_DOC_ENV}/rollback/", views.rollback, name="release-rollback"),
    path(f"{_DOC_ENV}/shadow/", views.shadow, name="release-shadow"),
    path(f"{_DOC_ENV}/shadow/stop/", views.shadow_stop, name="release-shadow-stop"),
    path(f"{_DOC_ENV}/shadow/promote/", views.shadow_promote, name="release-shadow-promote"),
    path(f"{_DOC_ENV}/rollout/", views.rollout_start, name="release-rollout"),
    path(_ROLLOUT, views.rollout_page, name="rollout-page"),
    *(
        path(
            f"{_ROLLOUT}{action}/", views.rollout_act, {"action": action}, name=f"rollout-{action}"
        )
        for action in views.ROLLOUT_ACTIONS
    ),
    path(f"{_ROLLOUT}watch-rollback/", views.rollout_watch_rollback, name="rollout-watch-rollback"),
    # The id runtimes and traces carry (ro-<n>): to its page (the trace page links here).
    path("rollouts/<slug:key>/", views.rollout_by_key, name="rollout-detail"),
    path("releases/<slug:agent>/history/", views.history, name="release-history"),
    path(
        "releases/<slug:agent>/schedules/<int:pk>/cancel/",
        views.schedule_cancel,
        name="schedule-cancel",
    ),
    path("releases/<slug:agent>/promote/", views.promote, name="release-promote"),
    path(
        "releases/<slug:agent>/approvals/<int:pk>/", views.approval_detail, name="approval-detail"
    ),
    # An environment's calendar (freeze windows, change hours, freeze break-glass): admins.
    path(_CALENDAR, views.calendar_page, name="environment-calendar"),
    path(_CALENDAR + "freezes/", views.calendar_freeze_add, name="calendar-freeze-add"),
    path(
        _CALENDAR + "freezes/<int:pk>/remove/",
        views.calendar_freeze_remove,
        name="freeze-window-remove",
    ),
    path(_CALENDAR + "hours/", views.calendar_hours_set, name="calendar-hours"),
    path(_CALENDAR + "break-glass/", views.calendar_break_glass_start, name="calendar-break-glass"),
    path(
        _CALENDAR + "break-glass/end/",
        views.calendar_break_glass_end,
        name="calendar-break-glass-end",
    ),
    path(
        "releases/<slug:agent>/approvals/<int:pk>/decide/",
        views.approval_decide,
        name="approval-decide",
    ),
    path(
        "releases/<slug:agent>/approvals/<int:pk>/withdraw/",
        views.approval_withdraw,
        name="approval-withdraw",
    ),
]

REQUIRED = {
    "release-overview": AUTHENTICATED,  # shows only the agents the user can see
    "change-system": Everywhere(Capability.MANAGE_CATALOG),  # environment settings
    "release-publish": Capability.VIEW_CONFIG,  # the service checks publish / request rights
    "release-rollback": Capability.ROLLBACK,
    # Shadows: the service checks the right to publish there (a protected one: to request).
    "release-shadow": Capability.VIEW_CONFIG,
    "release-shadow-stop": Capability.VIEW_CONFIG,
    "release-shadow-promote": Capability.VIEW_CONFIG,
    # Rollouts: the service checks the right to publish there (stop: or to roll back).
    "release-rollout": Capability.VIEW_CONFIG,
    "rollout-page": Capability.VIEW_CONFIG,
    **{f"rollout-{action}": Capability.VIEW_CONFIG for action in views.ROLLOUT_ACTIONS},
    "rollout-watch-rollback": Capability.ROLLBACK,  # the one-click rollback of a watch warning
    "rollout-detail": AUTHENTICATED,  # redirects to the agent's page, 404 out of scope
    "release-history": Capability.VIEW_CONFIG,
    "schedule-cancel": Capability.VIEW_CONFIG,  # the service allows the requester or an admin
    "release-promote": Capability.VIEW_CONFIG,  # the service checks the publish rights
    "approval-detail": Capability.VIEW_CONFIG,
    "approval-decide": Capability.APPROVE,
    "approval-withdraw": Capability.VIEW_CONFIG,  # the service allows only the requester
    # An environment's calendar is its admins' (as its settings are: catalog-environment-edit).
    **{
        name: Everywhere(Capability.MANAGE_CATALOG)
        for name in (
            "environment-calendar",
            "calendar-freeze-add",
            "freeze-window-remove",
            "calendar-hours",
            "calendar-break-glass",
            "calendar-break-glass-end",
        )
    },
}

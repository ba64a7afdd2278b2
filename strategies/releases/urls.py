"""Release pages (/releases/)."""

from django.urls import path

from console.kernel.policy import AUTHENTICATED, Capability, Everywhere
from strategies.releases import views
from strategies.releases.views import changes as change_views

_DOC_ENV = "releases/<slug:agent>/<slug:document>/<slug:environment>"
_ROLLOUT = "releases/<slug:agent>/rollouts/ro-<int:pk>/"

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
    path("releases/<slug:agent>/promote/", views.promote, name="release-promote"),
    path(
        "releases/<slug:agent>/approvals/<int:pk>/", views.approval_detail, name="approval-detail"
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
    "release-promote": Capability.VIEW_CONFIG,  # the service checks the publish rights
    "approval-detail": Capability.VIEW_CONFIG,
    "approval-decide": Capability.APPROVE,
    "approval-withdraw": Capability.VIEW_CONFIG,  # the service allows only the requester
}

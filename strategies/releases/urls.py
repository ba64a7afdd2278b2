"""Release pages (/releases/)."""

from django.urls import path

from console.kernel.policy import AUTHENTICATED, Capability
from strategies.releases import views

_DOC_ENV = "releases/<slug:agent>/<slug:document>/<slug:environment>"

urlpatterns = [
    path("releases/", views.overview, name="release-overview"),
    path(f"{_DOC_ENV}/publish/", views.publish, name="release-publish"),
    path(f"{_DOC_ENV}/rollback/", views.rollback, name="release-rollback"),
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
    "release-publish": Capability.VIEW_CONFIG,  # the service checks publish / request rights
    "release-rollback": Capability.ROLLBACK,
    "release-history": Capability.VIEW_CONFIG,
    "release-promote": Capability.VIEW_CONFIG,  # the service checks the publish rights
    "approval-detail": Capability.VIEW_CONFIG,
    "approval-decide": Capability.APPROVE,
    "approval-withdraw": Capability.VIEW_CONFIG,  # the service allows only the requester
}

"""Regression set pages: the agent's sets, one set against what is live and any version, and
the trace page's "keep in a regression set" form."""

from django.urls import path, re_path

from console.kernel.policy import Capability
from traces.regressions import views
from traces.urls import REQUEST_ID

SETS = "agents/<slug:agent>/regression-sets/"

urlpatterns = [
    path(SETS, views.set_list_page, name="regression-sets"),
    path(SETS + "grow", views.grow_page, name="regression-grow"),
    path(SETS + "<int:pk>/", views.set_page, name="regression-set-detail"),
    path(SETS + "<int:pk>/required", views.set_require_page, name="regression-set-require"),
    path(
        "agents/<slug:agent>/regression-members/<int:pk>/remove",
        views.member_remove_page,
        name="regression-member-remove",
    ),
    re_path(rf"^traces/{REQUEST_ID}/keep\Z", views.trace_keep, name="trace-keep"),
]

# Kept requests are looked at like traces (404 out of scope, 403 without, logged); keeping or
# removing one needs the right to (policy.check_user_can_manage_regressions).
REQUIRED = {
    "regression-sets": Capability.VIEW_TRACES,
    "regression-set-detail": Capability.VIEW_TRACES,
    "regression-member-remove": {"POST": Capability.MANAGE_REGRESSIONS},
    # An environment's rule (which sets a version must pass there) is the catalog's: admin.
    "regression-set-require": {"POST": Capability.MANAGE_CATALOG},
    "trace-keep": {"POST": Capability.MANAGE_REGRESSIONS},
    # A saved search's requests added to a set: looking is a look at traces, adding a keep.
    "regression-grow": {"GET": Capability.VIEW_TRACES, "POST": Capability.MANAGE_REGRESSIONS},
}

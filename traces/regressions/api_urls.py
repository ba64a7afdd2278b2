"""Operator API for regression sets (/api/v1/)."""

from django.urls import path

from console.kernel.policy import Capability
from traces.regressions import api

SETS = "agents/<slug:agent>/regression-sets"

urlpatterns = [
    path(SETS, api.regression_sets, name="api-regression-sets"),
    path(SETS + "/<int:pk>", api.regression_set_detail, name="api-regression-set-detail"),
    path(SETS + "/<int:pk>/members", api.regression_set_members, name="api-regression-set-members"),
    path(
        SETS + "/<int:pk>/required-in",
        api.regression_set_required_in,
        name="api-regression-set-required-in",
    ),
    path(
        "agents/<slug:agent>/regression-members/<int:pk>",
        api.regression_member_detail,
        name="api-regression-member-detail",
    ),
    path("agents/<slug:agent>/regression-check", api.regression_check, name="api-regression-check"),
]

# Kept requests are looked at like traces; keeping them (sets, members) takes the right to;
# checking a version against them also needs the sight of the configuration
# (policy.check_user_can_check_regressions). 404 out of scope, 403 without, logged.
REQUIRED = {
    "api-regression-sets": {"GET": Capability.VIEW_TRACES, "POST": Capability.MANAGE_REGRESSIONS},
    "api-regression-set-detail": {
        "GET": Capability.VIEW_TRACES,
        "PATCH": Capability.MANAGE_REGRESSIONS,
        "DELETE": Capability.MANAGE_REGRESSIONS,
    },
    "api-regression-set-members": {
        "GET": Capability.VIEW_TRACES,
        "POST": Capability.MANAGE_REGRESSIONS,
    },
    # Which environments require a set is an environment's rule: the catalog's right (admin).
    "api-regression-set-required-in": {
        "GET": Capability.VIEW_TRACES,
        "PUT": Capability.MANAGE_CATALOG,
    },
    "api-regression-member-detail": {
        "GET": Capability.VIEW_TRACES,
        "DELETE": Capability.MANAGE_REGRESSIONS,
    },
    "api-regression-check": {"POST": Capability.VIEW_CONFIG},
}

"""Operator API for outcomes (/api/v1/): an environment's outcome kinds, a request's outcomes."""

from django.urls import path

from console.kernel.policy import AUTHENTICATED, Capability, Everywhere
from traces.outcomes import api

ENVIRONMENT = "environments/<slug:environment>/outcome-kinds"

urlpatterns = [
    path(ENVIRONMENT, api.outcome_kinds, name="api-outcome-kinds"),
    path(ENVIRONMENT + "/<slug:kind>", api.outcome_kind_detail, name="api-outcome-kind-detail"),
    path("outcomes", api.outcomes_of_request, name="api-outcomes-of-request"),
]

# Environments are console-wide, and so is what they accept: reading the kinds is for anyone
# signed in (like the environments), changing them for their admins (policy:
# check_user_can_manage_outcome_kinds). Outcomes are looked at like traces.
REQUIRED = {
    "api-outcome-kinds": {
        "GET": AUTHENTICATED,
        "POST": Everywhere(Capability.MANAGE_CATALOG),
    },
    "api-outcome-kind-detail": {
        "GET": AUTHENTICATED,
        "PATCH": Everywhere(Capability.MANAGE_CATALOG),
    },
    "api-outcomes-of-request": Capability.VIEW_TRACES,
}

"""Outcome kinds page: what an environment accepts as outcomes (its admins declare them)."""

from django.urls import path

from console.kernel.policy import Capability, Everywhere
from traces.outcomes import views

ENVIRONMENT = "catalog/environments/<slug:environment>/outcomes/"

urlpatterns = [
    path(ENVIRONMENT, views.kinds_page, name="outcome-kinds"),
    path(ENVIRONMENT + "<slug:kind>/", views.kind_edit, name="outcome-kind-edit"),
    path(ENVIRONMENT + "<slug:kind>/retire", views.kind_retire, name="outcome-kind-retire"),
]

# Everything about environments is console-wide (strategies.catalog.urls): so are their
# outcome kinds (policy: check_user_can_manage_outcome_kinds).
REQUIRED = {
    "outcome-kinds": Everywhere(Capability.MANAGE_CATALOG),
    "outcome-kind-edit": Everywhere(Capability.MANAGE_CATALOG),
    "outcome-kind-retire": Everywhere(Capability.MANAGE_CATALOG),
}

"""Data protection pages: an environment's redaction rules, erasure by principal."""

from django.urls import path

from console.kernel.policy import Capability, Everywhere
from traces.protection import views

ENVIRONMENT = "catalog/environments/<slug:environment>/data-protection/"

urlpatterns = [
    path(ENVIRONMENT, views.rules_page, name="data-protection-rules"),
    path(ENVIRONMENT + "preview", views.rules_preview, name="data-protection-preview"),
    path(ENVIRONMENT + "<slug:rule>/remove", views.rule_remove, name="data-protection-rule-remove"),
    path("data-protection/erasures/", views.erasures_page, name="data-protection-erasures"),
    path("data-protection/erasures/<int:pk>/", views.erasure_page, name="data-protection-erasure"),
    path(
        "data-protection/erasures/<int:pk>/receipt.json",
        views.erasure_receipt,
        name="data-protection-erasure-receipt",
    ),
]

# An environment's rules are its admins' (as its outcome kinds); an erasure reaches every
# agent's traces, so it needs the same capability on all of them (policy:
# check_user_can_manage_data_protection).
REQUIRED = {
    name: Everywhere(Capability.MANAGE_CATALOG)
    for name in (
        "data-protection-rules",
        "data-protection-preview",
        "data-protection-rule-remove",
        "data-protection-erasures",
        "data-protection-erasure",
        "data-protection-erasure-receipt",
    )
}

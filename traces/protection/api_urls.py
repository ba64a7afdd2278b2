"""Operator API for data protection (/api/v1/): redaction rules, erasures."""

from django.urls import path

from console.kernel.policy import Capability, Everywhere
from traces.protection import api

ENVIRONMENT = "environments/<slug:environment>/redaction-rules"

urlpatterns = [
    path(ENVIRONMENT, api.redaction_rules, name="api-redaction-rules"),
    path(ENVIRONMENT + "/preview", api.redaction_preview, name="api-redaction-preview"),
    path(ENVIRONMENT + "/<slug:rule>", api.redaction_rule_detail, name="api-redaction-rule"),
    path("erasures", api.erasures, name="api-erasures"),
    path("erasures/<int:pk>", api.erasure_detail, name="api-erasure"),
]

# Deny by default: rules, previews and erasures are the admins' on all agents (policy:
# check_user_can_manage_data_protection, asked again in each view).
REQUIRED = {
    name: Everywhere(Capability.MANAGE_CATALOG)
    for name in (
        "api-redaction-rules",
        "api-redaction-preview",
        "api-redaction-rule",
        "api-erasures",
        "api-erasure",
    )
}

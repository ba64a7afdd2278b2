"""Operator API: roles, grants, audit log, access log (under /api/v1/)."""

from __future__ import annotations

from django.urls import path

from console.access import api
from console.kernel.policy import Capability, Everywhere

urlpatterns = [
    path("roles/", api.role_list, name="api-role-list"),
    path("roles/<int:pk>/", api.role_detail, name="api-role-detail"),
    path("grants/", api.grant_list, name="api-grant-list"),
    path("grants/<int:pk>/", api.grant_detail, name="api-grant-detail"),
    path("group-mappings/", api.group_mapping_list, name="api-group-mapping-list"),
    path("group-mappings/<int:pk>/", api.group_mapping_detail, name="api-group-mapping-detail"),
    path("audit/", api.AuditList.as_view(), name="api-audit-list"),
    path("audit/export", api.audit_export, name="api-audit-export"),
    path("access-log/", api.AccessLogList.as_view(), name="api-access-log-list"),
]

# Roles are console-wide: reading them needs MANAGE_GRANTS somewhere, writing them needs it on
# all agents. Grant writes are checked per agent by the service (404 out of scope).
REQUIRED = {
    "api-role-list": {
        "GET": Capability.MANAGE_GRANTS,
        "POST": Everywhere(Capability.MANAGE_GRANTS),
    },
    "api-role-detail": {
        "GET": Capability.MANAGE_GRANTS,
        "PATCH": Everywhere(Capability.MANAGE_GRANTS),
    },
    "api-grant-list": Capability.MANAGE_GRANTS,
    "api-grant-detail": Capability.MANAGE_GRANTS,
    # Mappings are console-wide configuration, as on the page.
    "api-group-mapping-list": Everywhere(Capability.MANAGE_GRANTS),
    "api-group-mapping-detail": Everywhere(Capability.MANAGE_GRANTS),
    "api-audit-list": Capability.VIEW_AUDIT,
    "api-audit-export": Capability.VIEW_AUDIT,
    "api-access-log-list": Capability.VIEW_AUDIT,
}

"""Operator API: roles, grants, audit log, access log (under /api/v1/)."""

from __future__ import annotations

from django.urls import path

from console import access_api as api
from console.policy import Capability

urlpatterns = [
    path("roles/", api.role_list, name="api-role-list"),
    path("roles/<int:pk>/", api.role_detail, name="api-role-detail"),
    path("grants/", api.grant_list, name="api-grant-list"),
    path("grants/<int:pk>/", api.grant_detail, name="api-grant-detail"),
    path("audit/", api.AuditList.as_view(), name="api-audit-list"),
    path("access-log/", api.AccessLogList.as_view(), name="api-access-log-list"),
]

# Writing roles needs MANAGE_GRANTS on all agents (checked by the service: 403 otherwise).
REQUIRED = {
    "api-role-list": Capability.MANAGE_GRANTS,
    "api-role-detail": Capability.MANAGE_GRANTS,
    "api-grant-list": Capability.MANAGE_GRANTS,
    "api-grant-detail": Capability.MANAGE_GRANTS,
    "api-audit-list": Capability.VIEW_AUDIT,
    "api-access-log-list": Capability.VIEW_AUDIT,
}

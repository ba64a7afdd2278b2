"""Pages: access management (roles, grants, who has what, locked sign-ins), the audit log,
the access log."""

from __future__ import annotations

from django.urls import path

from console.access import log_views, views
from console.kernel.policy import Capability, Everywhere

urlpatterns = [
    path("access/", views.access_overview, name="access-overview"),
    path("access/roles/new/", views.role_create, name="role-create"),
    path("access/roles/<int:pk>/edit/", views.role_edit, name="role-edit"),
    path("access/grants/new/", views.grant_create, name="grant-create"),
    path("access/grants/<int:pk>/revoke/", views.grant_revoke, name="grant-revoke"),
    path("access/sign-in-locks/", views.login_lock_list, name="login-lock-list"),
    path("access/sign-in-locks/unlock/", views.login_lock_clear, name="login-lock-clear"),
    path("access/group-mappings/", views.group_mapping_list, name="group-mapping-list"),
    path(
        "access/group-mappings/<int:pk>/remove/",
        views.group_mapping_delete,
        name="group-mapping-delete",
    ),
    path("audit/", log_views.audit_list, name="audit-list"),
    path("audit/<int:pk>/", log_views.audit_detail, name="audit-detail"),
    path("audit/export.csv", log_views.audit_export_csv, name="audit-export-csv"),
    path("audit/access/", log_views.access_log_list, name="access-log-list"),
]

REQUIRED = {
    "access-overview": Capability.MANAGE_GRANTS,
    "role-create": Everywhere(Capability.MANAGE_GRANTS),
    "role-edit": Everywhere(Capability.MANAGE_GRANTS),
    "grant-create": Capability.MANAGE_GRANTS,
    "grant-revoke": Capability.MANAGE_GRANTS,
    "login-lock-list": Everywhere(Capability.MANAGE_GRANTS),
    "login-lock-clear": Everywhere(Capability.MANAGE_GRANTS),
    "group-mapping-list": Everywhere(Capability.MANAGE_GRANTS),
    "group-mapping-delete": Everywhere(Capability.MANAGE_GRANTS),
    "audit-list": Capability.VIEW_AUDIT,
    "audit-detail": Capability.VIEW_AUDIT,
    "audit-export-csv": Capability.VIEW_AUDIT,
    "access-log-list": Capability.VIEW_AUDIT,
}

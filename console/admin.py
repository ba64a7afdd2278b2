"""Django admin (/django-admin/): break-glass only.

Only active superusers get in (staff status alone is not enough), sign-in is throttled like
the console's, and every change made here writes an audit row in the same transaction, with
the actor's name — exactly like a change made through the console. The logs are read-only.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.forms.models import model_to_dict

from console.accounts.forms import AdminLoginForm
from console.kernel.audit import AuditAction, audit_record
from console.kernel.models import AccessLogEntry, AuditRecord, Grant, Role


def _superuser_only(request) -> bool:
    return request.user.is_active and request.user.is_superuser


admin.site.has_permission = _superuser_only
admin.site.login_form = AdminLoginForm
admin.site.site_header = "Context Console — break-glass admin (every change is audited)"


def _state(obj) -> dict:
    """A JSON-safe picture of a row for the audit log (secrets left out)."""
    data = model_to_dict(obj)
    data.pop("password", None)
    return {
        key: (
            [str(v.pk if hasattr(v, "pk") else v) for v in value]
            if isinstance(value, list | tuple | set)
            else value
            if isinstance(value, str | int | float | bool | type(None) | dict)
            else str(value)
        )
        for key, value in data.items()
    }


def _agent_of(obj):
    return getattr(obj, "agent", None)


class AuditedAdminMixin:
    """Write an audit row for every add, change and delete made in the admin."""

    def save_model(self, request, obj, form, change):
        before = _state(type(obj).objects.get(pk=obj.pk)) if change and obj.pk else None
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action=AuditAction.ADMIN_CHANGE if change else AuditAction.ADMIN_ADD,
            target=obj,
            agent=_agent_of(obj),
            before=before,
            after=_state(obj),
        )

    def save_related(self, request, form, formsets, change):
        before = _state(form.instance)
        super().save_related(request, form, formsets, change)
        after = _state(form.instance)
        if after != before:
            audit_record(
                actor=request.user,
                action=AuditAction.ADMIN_CHANGE_RELATED,
                target=form.instance,
                agent=_agent_of(form.instance),
                before=before,
                after=after,
            )

    def delete_model(self, request, obj):
        self._audit_delete(request, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self._audit_delete(request, obj)
        super().delete_queryset(request, queryset)

    def _audit_delete(self, request, obj):
        audit_record(
            actor=request.user,
            action=AuditAction.ADMIN_DELETE,
            target=(obj._meta.label_lower, obj.pk, str(obj)),
            agent=_agent_of(obj),
            before=_state(obj),
        )


@admin.register(Role)
class RoleAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["name", "is_standard", "capabilities"]
    readonly_fields = ["is_standard", "created_at"]


@admin.register(Grant)
class GrantAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["__str__", "role", "agent", "mapping", "created_by", "created_at"]
    list_filter = ["role", "agent"]
    # Which mapping made a grant is the mapping's to say (console.access.group_mappings).
    readonly_fields = ["created_by", "created_at", "mapping"]


class ReadOnlyLogAdmin(admin.ModelAdmin):
    """The logs are append-only in the database; the admin only reads them."""

    list_display = ["occurred_at", "actor_label", "action", "target_label", "agent_key"]
    list_filter = ["agent_key", "action"]
    search_fields = ["actor_label", "action", "target_label", "request_id"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


admin.site.register(AuditRecord, ReadOnlyLogAdmin)
admin.site.register(AccessLogEntry, ReadOnlyLogAdmin)

# Users and groups: the same break-glass auditing as everything else.
User = get_user_model()


class AuditedUserAdmin(AuditedAdminMixin, UserAdmin):
    def user_change_password(self, request, id, form_url=""):
        """The password form saves outside save_model: audit it here (never the password)."""
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:
            user = User.objects.get(pk=id)
            audit_record(actor=request.user, action=AuditAction.ADMIN_PASSWORD_CHANGE, target=user)
        return response


class AuditedGroupAdmin(AuditedAdminMixin, GroupAdmin):
    pass


for model, model_admin in ((User, AuditedUserAdmin), (Group, AuditedGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)

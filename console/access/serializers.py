"""API shapes for roles, grants, the audit log and the access log (reads and inputs)."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.audit import (
    CHAIN_FIELDS,
    OPTIONAL_HASHED,
    AccessAction,
    AuditAction,
    action_filter_choices,
)
from console.kernel.models import AccessLogEntry, AuditRecord, Grant, GroupMapping, Role
from console.kernel.policy import CAPABILITY_VALUES


class RoleSerializer(serializers.ModelSerializer):
    capabilities = serializers.ListField(child=serializers.ChoiceField(choices=CAPABILITY_VALUES))

    class Meta:
        model = Role
        fields = ["id", "name", "description", "capabilities", "is_standard", "created_at"]
        read_only_fields = ["id", "is_standard", "created_at"]


class RoleCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    capabilities = serializers.ListField(
        child=serializers.ChoiceField(choices=CAPABILITY_VALUES),
        required=False,
        default=list,
        help_text="Omit for a role that can do nothing yet.",
    )


class RoleUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    capabilities = serializers.ListField(
        child=serializers.ChoiceField(choices=CAPABILITY_VALUES), required=False
    )


class GrantSerializer(serializers.ModelSerializer):
    user = serializers.CharField(
        source="user.username", default=None, read_only=True, allow_null=True
    )
    group = serializers.CharField(
        source="group.name", default=None, read_only=True, allow_null=True
    )
    role = serializers.CharField(source="role.name", read_only=True)
    agent = serializers.CharField(
        source="agent.key",
        default=None,
        read_only=True,
        allow_null=True,
        help_text="null = all agents",
    )
    created_by = serializers.CharField(
        source="created_by.username", default=None, read_only=True, allow_null=True
    )
    from_mapping = serializers.CharField(
        source="mapping.__str__",
        default=None,
        read_only=True,
        allow_null=True,
        help_text="Set when a group mapping made it: it follows the group and cannot be "
        "revoked by hand (409 grant_from_mapping).",
    )

    class Meta:
        model = Grant
        fields = [
            "id",
            "user",
            "group",
            "role",
            "agent",
            "created_by",
            "created_at",
            "from_mapping",
        ]


class GrantCreateSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, help_text="username (or give group)")
    group = serializers.CharField(required=False, help_text="group name (or give user)")
    role = serializers.CharField(help_text="role name")
    agent = serializers.CharField(
        required=False, allow_null=True, default=None, help_text="agent key; null = all agents"
    )
    reason = serializers.CharField(min_length=3)


class GrantRevokeSerializer(serializers.Serializer):
    reason = serializers.CharField(min_length=3)


class GroupMappingSerializer(serializers.ModelSerializer):
    role = serializers.CharField(
        source="role_name",
        read_only=True,
        help_text="The role's name when mapped (role_exists false: it was deleted since).",
    )
    role_exists = serializers.SerializerMethodField()
    agents = serializers.SerializerMethodField(help_text='"all", or the agents\' keys')
    created_by = serializers.CharField(
        source="created_by.username", default=None, read_only=True, allow_null=True
    )
    grant_count = serializers.SerializerMethodField(help_text="Grants it has made, held now.")

    class Meta:
        model = GroupMapping
        fields = [
            "id",
            "provider",
            "group",
            "role",
            "role_exists",
            "agents",
            "created_by",
            "created_at",
            "grant_count",
        ]

    def get_role_exists(self, mapping) -> bool:
        return mapping.role_id is not None

    def get_agents(self, mapping) -> str | list[str]:
        return "all" if mapping.all_agents else sorted(a.key for a in mapping.agents.all())

    def get_grant_count(self, mapping) -> int:
        return mapping.grants.count()


class GroupMappingCreateSerializer(serializers.Serializer):
    provider = serializers.CharField(help_text="The identity provider's key (OIDC_PROVIDERS …)")
    group = serializers.CharField(help_text="The group as the provider sends it")
    role = serializers.CharField(help_text="role name")
    agents = serializers.JSONField(
        help_text='"all", or a list of agent keys', default="all", required=False
    )
    reason = serializers.CharField(min_length=3)


_LOG_FIELDS = ["id", *CHAIN_FIELDS, *OPTIONAL_HASHED, "prev_hash", "hash"]


class AuditRecordSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditRecord
        fields = _LOG_FIELDS + ["before", "after", "changes"]


class AccessLogEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AccessLogEntry
        fields = _LOG_FIELDS + ["outcome", "reason", "detail"]


def _action_filter(actions) -> serializers.ChoiceField:
    """The `action` filter of a log: one of its actions, or a family of them ("grant.")."""
    return serializers.ChoiceField(
        choices=action_filter_choices(actions),
        required=False,
        default="",
        help_text="an action (grant.revoke) or a family of them (grant.)",
        error_messages={"invalid_choice": "No action of this log is called “{input}”."},
    )


class LogFilterSerializer(serializers.Serializer):
    """Query parameters of the audit log list (same as the pages' filters)."""

    agent = serializers.CharField(required=False, default="")
    actor = serializers.CharField(required=False, default="")
    action = _action_filter(AuditAction)
    target = serializers.CharField(required=False, default="", help_text="label contains or id")
    token = serializers.CharField(
        required=False, default="", help_text="the personal token's name (or id) it was made with"
    )
    since = serializers.DateTimeField(required=False, default=None)
    until = serializers.DateTimeField(required=False, default=None)


class AccessLogFilterSerializer(LogFilterSerializer):
    """The access log's filters: the log's, its own actions, and the outcome (the audit log
    has none)."""

    action = _action_filter(AccessAction)
    outcome = serializers.ChoiceField(choices=["", "allowed", "denied"], required=False, default="")


EXPORT_MAX_LIMIT = 5000


class AuditExportParamsSerializer(LogFilterSerializer):
    """The audit export's query: the log's filters, and a cursor."""

    after = serializers.IntegerField(
        required=False,
        default=0,
        min_value=0,
        help_text="Rows with an id above this one (the X-Next-Cursor of the previous page).",
    )
    limit = serializers.IntegerField(
        required=False, default=1000, min_value=1, max_value=EXPORT_MAX_LIMIT
    )

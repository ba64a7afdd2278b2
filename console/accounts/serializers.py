"""API shapes for personal API tokens (reads and inputs)."""

from __future__ import annotations

from rest_framework import serializers

from console.accounts.models import PersonalToken
from console.accounts.personal_tokens import DEFAULT_DAYS, MAX_DAYS, NAME_MAX
from console.kernel.api_schema import StrictSerializer
from console.kernel.policy import CAPABILITY_VALUES


class PersonalTokenSerializer(serializers.ModelSerializer):
    all_agents = serializers.BooleanField(
        read_only=True, help_text="Every agent your grants cover; otherwise only `agents`."
    )
    agents = serializers.SlugRelatedField(
        slug_field="key",
        many=True,
        read_only=True,
        help_text="The agents it covers when not all_agents ([]: none, e.g. all deleted).",
    )
    state = serializers.CharField(read_only=True, help_text="active | expired | revoked")

    class Meta:
        model = PersonalToken
        fields = [
            "id",
            "name",
            "prefix",
            "capabilities",
            "all_agents",
            "agents",
            "state",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
        ]


class PersonalTokenCreatedSerializer(PersonalTokenSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The secret, shown this once: only its hash is stored."
    )

    class Meta(PersonalTokenSerializer.Meta):
        fields = [*PersonalTokenSerializer.Meta.fields, "token"]


class PersonalTokenCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=NAME_MAX, help_text="unique among your tokens")
    capabilities = serializers.ListField(
        child=serializers.ChoiceField(choices=CAPABILITY_VALUES),
        allow_empty=False,
        help_text="Only capabilities you hold on at least one agent (400 otherwise).",
    )
    all_agents = serializers.BooleanField(
        required=False,
        help_text="Every agent your grants cover, now and later. Omitted: true when no "
        "agents are given.",
    )
    agents = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        default=list,
        help_text="agent keys; omit or [] (with all_agents omitted or true) for every agent "
        "your grants cover",
    )
    expires_in_days = serializers.IntegerField(
        required=False, default=DEFAULT_DAYS, min_value=1, max_value=MAX_DAYS
    )

    def validate(self, attrs):
        # Omitted, all_agents is what the API always meant: no agents given, every agent.
        attrs.setdefault("all_agents", not attrs.get("agents"))
        return attrs

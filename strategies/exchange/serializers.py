"""API shapes for configuration as code (docs/CONFIG_AS_CODE.md). The file itself is read by
strategies.exchange.format, which reports every problem at its path in the file; these
shapes describe it for the OpenAPI schema and keep the request envelope strict."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer


class ConfigAgentSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)


class ConfigVersionSerializer(serializers.Serializer):
    number = serializers.IntegerField(min_value=1)
    body = serializers.JSONField(help_text="The document body (docs/runtime-contract.md §5).")
    note = serializers.CharField(allow_blank=True)


class ConfigDocumentSerializer(serializers.Serializer):
    key = serializers.CharField()
    kind = serializers.CharField(help_text="strategy or profile")
    name = serializers.CharField(allow_blank=True)
    versions = ConfigVersionSerializer(many=True, help_text="Every frozen version, oldest first.")
    draft = ConfigVersionSerializer(allow_null=True, help_text="The open draft, or null.")


class ConfigFileSerializer(serializers.Serializer):
    format = serializers.CharField(help_text="Always context-console/agent-config.")
    format_version = serializers.IntegerField(help_text="1")
    agent = ConfigAgentSerializer()
    documents = ConfigDocumentSerializer(many=True, help_text="The profile first, then by key.")
    live = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()),
        help_text="What is live: environment key → document key → version number.",
    )


class ConfigImportRequest(StrictSerializer):
    file = serializers.JSONField(help_text="A file as GET …/config returns it.")
    dry_run = serializers.BooleanField(
        default=True, help_text="true (the default): only plan; false: apply."
    )
    plan = serializers.CharField(
        required=False,
        help_text="The plan hash of the dry run you reviewed: the apply is refused (409 "
        "plan_changed) when the file or the console changed since.",
    )


class ConfigPlanSerializer(serializers.Serializer):
    agent = serializers.JSONField(help_text="{key, name, description, action}")
    documents = serializers.JSONField(
        help_text="Per document: action and each version step (exists, same_as_latest, "
        "create) with the plain-English changes; the draft step."
    )
    releases = serializers.JSONField(
        help_text="Per environment and document: live now → after, action (unchanged, "
        "publish, request, skip) with the reason, changes and findings against the "
        "environment's manifest."
    )
    errors = serializers.JSONField(help_text="Findings that stop the apply, at their paths.")
    notes = serializers.ListField(child=serializers.CharField())
    file_sha256 = serializers.CharField()
    plan = serializers.CharField(help_text="The plan hash: send it back to apply this plan.")
    valid = serializers.BooleanField()
    changes_anything = serializers.BooleanField()
    counts = serializers.DictField(child=serializers.IntegerField())


class ConfigImportResponse(serializers.Serializer):
    dry_run = serializers.BooleanField()
    plan = ConfigPlanSerializer()
    outcome = serializers.JSONField(
        allow_null=True,
        help_text="After an apply: versions_created, drafts_written, published, "
        "approval_requests (with their ids), skipped (with the reason). Null for a dry run.",
    )

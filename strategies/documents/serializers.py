"""API shapes for agents, documents and versions. Requests are strict: unknown fields are
refused so a typo never silently does nothing."""

from __future__ import annotations

import re

from context_runtime import vocabulary
from rest_framework import serializers

from console.kernel.api_schema import ErrorDetailSerializer, ErrorSerializer, StrictSerializer  # noqa: F401 - re-exported
from console.kernel.limits import MAX_NAME_CHARS, MAX_NOTE_CHARS, check_request_size


class KeyField(serializers.SlugRelatedField):
    """An object named by its key (environment, agent): unknown → 400 `does_not_exist` at
    its path. Something that cannot be a key (not a slug, too long) is refused before any
    query, so odd input never reaches the database."""

    def __init__(self, **kwargs):
        kwargs.setdefault("slug_field", "key")
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str) or not KEY.fullmatch(data):
            self.fail("does_not_exist", slug_name=self.slug_field, value=str(data)[:100])
        return super().to_internal_value(data)


KEY = re.compile(r"[-a-zA-Z0-9_]{1,100}")


def parse_strict(request, serializer_class, *, limit: int, what: str) -> dict:
    """The operator API's input: the size first (413, nothing parsed for an oversize body),
    then the strict serializer (400 naming every bad or unknown field)."""
    check_request_size(request, limit, what=what)
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# --------------------------------------------------------------------------- requests


class DocumentCreateRequest(StrictSerializer):
    key = serializers.CharField(
        max_length=100,
        help_text="The task key the runtime asks for: lowercase letters, digits and "
        "underscores ('profile' is reserved).",
    )
    name = serializers.CharField(
        required=False, allow_blank=True, max_length=MAX_NAME_CHARS, default=""
    )
    body = serializers.JSONField(help_text="The first draft's body (docs/runtime-contract.md §5).")
    note = serializers.CharField(
        required=False, allow_blank=True, max_length=MAX_NOTE_CHARS, default=""
    )


class DraftCreateRequest(StrictSerializer):
    body = serializers.JSONField(help_text="The document body (docs/runtime-contract.md §5).")
    note = serializers.CharField(
        required=False, allow_blank=True, max_length=MAX_NOTE_CHARS, default=""
    )


class DraftUpdateRequest(StrictSerializer):
    body = serializers.JSONField()
    revision = serializers.IntegerField(
        min_value=1, help_text="The draft revision you loaded; a stale one gets 409."
    )
    note = serializers.CharField(required=False, allow_blank=True, max_length=MAX_NOTE_CHARS)


class FreezeRequest(StrictSerializer):
    revision = serializers.IntegerField(
        min_value=1, required=False, help_text="Refuse (409) if the draft changed since."
    )
    note = serializers.CharField(required=False, allow_blank=True, max_length=MAX_NOTE_CHARS)


class ValidateRequest(StrictSerializer):
    kind = serializers.ChoiceField(choices=vocabulary.KINDS)
    body = serializers.JSONField()
    environment = serializers.CharField(
        required=False, help_text="Also check against this environment's latest manifest."
    )


# --------------------------------------------------------------------------- responses


class VersionSummarySerializer(serializers.Serializer):
    number = serializers.IntegerField()
    state = serializers.CharField()
    revision = serializers.IntegerField()
    content_hash = serializers.CharField()
    author = serializers.CharField(source="author_label")
    note = serializers.CharField()
    parent = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    frozen_at = serializers.DateTimeField(allow_null=True)
    live_in = serializers.SerializerMethodField()

    def get_parent(self, obj) -> int | None:
        return obj.parent.number if obj.parent_id else None

    def get_live_in(self, obj) -> list[str]:
        return list(getattr(obj, "live_in", []))


class VersionSerializer(VersionSummarySerializer):
    body = serializers.JSONField()


class DocumentSerializer(serializers.Serializer):
    key = serializers.CharField()
    kind = serializers.CharField()
    name = serializers.CharField()
    latest_version = serializers.SerializerMethodField()
    draft = serializers.SerializerMethodField()
    live = serializers.SerializerMethodField()

    def get_latest_version(self, obj) -> int | None:
        return obj.latest.number if obj.latest else None

    def get_draft(self, obj) -> dict | None:
        if obj.draft is None:
            return None
        return {"number": obj.draft.number, "revision": obj.draft.revision}

    def get_live(self, obj) -> dict[str, int]:
        return {env: version.number for env, version in obj.live.items()}


class DocumentCreatedSerializer(serializers.Serializer):
    document = DocumentSerializer()
    draft = VersionSerializer()


class ChangeSerializer(serializers.Serializer):
    path = serializers.CharField()
    kind = serializers.ChoiceField(choices=["added", "removed", "changed"])
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    summary = serializers.CharField()


class DiffSerializer(serializers.Serializer):
    a = serializers.IntegerField()
    b = serializers.IntegerField()
    changes = ChangeSerializer(many=True)


class ValidationReportSerializer(serializers.Serializer):
    valid = serializers.BooleanField(help_text="No errors, and none against the manifest.")
    errors = ErrorDetailSerializer(many=True)
    flags = ErrorDetailSerializer(
        many=True, help_text="Need a capability, e.g. sensitive sections."
    )
    manifest_errors = ErrorDetailSerializer(many=True)
    environment = serializers.CharField(allow_null=True)
    manifest_version = serializers.IntegerField(allow_null=True)

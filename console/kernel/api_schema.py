"""Schema pieces shared by every API: the one error shape (see console/kernel/errors.py)."""

from __future__ import annotations

from rest_framework import serializers


class ErrorDetailSerializer(serializers.Serializer):
    path = serializers.CharField(
        help_text="Where in the request, e.g. traces[3].candidates[0].decision"
    )
    code = serializers.CharField()
    message = serializers.CharField()
    severity = serializers.CharField(
        required=False, help_text="Validation findings: error or flag."
    )


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = ErrorDetailSerializer(many=True)
    current = serializers.JSONField(required=False, help_text="409 only: the current state.")


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()


class StrictSerializer(serializers.Serializer):
    """A request shape that refuses fields it does not declare (`{"revison": 3}` is an
    error, not ignored), naming each one at its path together with any other field's error.
    The one strict request shape of the operator API."""

    def to_internal_value(self, data):
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, dict) else []
        errors = {name: ["Unknown field."] for name in unknown}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if errors and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **errors}) from exc
            raise
        if errors:
            raise serializers.ValidationError(errors, code="unknown_field")
        return value


UNAUTHENTICATED = {
    "description": "Not signed in, or the bearer token is unknown, expired or revoked "
    "(`WWW-Authenticate: Bearer`).",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def document_unauthenticated(result, generator, request, public):
    """drf-spectacular postprocessing hook: every API operation can answer 401 (no session,
    or a token that does not work), so each one documents it once, in the error shape."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation["responses"].setdefault("401", UNAUTHENTICATED)
    return result

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


def _error(description: str) -> dict:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


UNAUTHENTICATED = _error(
    "Not signed in, or the bearer token is unknown, expired or revoked "
    "(`WWW-Authenticate: Bearer`); a session past its idle timeout or absolute lifetime "
    "(`session_expired`, ended; `why` idle or absolute); a dangerous action (approve, "
    "break-glass, a sensitive section switched on) through a session whose password was last "
    "given too long ago (`reauthentication_required`: confirm it at `reauthenticate_url`; "
    "personal tokens are never asked)."
)
# What every operation can answer whatever it does, because something in front of every view
# answers it: the authentication, the NUL check (console.middleware.UnstorableInputMiddleware)
# and DRF's content negotiation (`?format=` naming a format the operation has no renderer
# for, an `Accept` header naming none it has).
EVERY_OPERATION = {
    "400": _error(
        "The address holds a NUL character (%00) in its path or a query parameter "
        "(`invalid_character`)."
    ),
    "401": UNAUTHENTICATED,
    "404": _error("`?format=` names a format this operation does not answer in."),
    "406": _error(
        "The `Accept` header names no format this operation answers in (`not_acceptable`); "
        "send `Accept: application/json` or leave it out."
    ),
}


def document_every_operation_answers(result, generator, request, public):
    """drf-spectacular postprocessing hook: each operation documents the statuses any operation
    can answer (EVERY_OPERATION), in the error shape; where it documents one already, for its
    own reasons, that stays and the error shape is the same."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict) and "responses" in operation:
                for status, response in EVERY_OPERATION.items():
                    operation["responses"].setdefault(status, response)
    return result

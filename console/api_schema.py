"""Schema pieces shared by every API: the one error shape (see console/errors.py)."""

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
    """A request shape that refuses fields it does not declare (`{"nmae": "x"}` is an
    error, not ignored), naming each one at its path."""

    def validate(self, attrs):
        if isinstance(self.initial_data, dict):
            unknown = sorted(set(self.initial_data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["Unknown field."] for name in unknown}, code="unknown_field"
                )
        return attrs

"""One family of application errors, mapped once to API errors and to UI messages.

API error shape (RUNTIME_API.md): {"error": {"code", "message", "details": [{path, code, message}]}}
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler


class ApplicationError(Exception):
    status = 400
    code = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        details: list[dict] | None = None,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.details = details or []
        if code:
            self.code = code
        self.extra = extra or {}

    def as_payload(self) -> dict:
        body = {"code": self.code, "message": self.message, "details": self.details}
        body.update(self.extra)
        return {"error": body}


class ValidationFailed(ApplicationError):
    status = 400
    code = "validation_failed"


class NotFound(ApplicationError):
    status = 404
    code = "not_found"


class Forbidden(ApplicationError):
    status = 403
    code = "forbidden"


class Conflict(ApplicationError):
    """A stale write: the payload carries the current state under `current`."""

    status = 409
    code = "conflict"


class PayloadTooLarge(ApplicationError):
    status = 413
    code = "payload_too_large"


def error_response(exc: ApplicationError) -> Response:
    return Response(exc.as_payload(), status=exc.status)


def _drf_details(data: Any, prefix: str = "") -> list[dict]:
    """Flatten DRF's nested error dicts into [{path, code, message}]."""
    out: list[dict] = []
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.extend(_drf_details(value, "" if key == "non_field_errors" else path))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            if isinstance(value, dict | list):
                out.extend(_drf_details(value, f"{prefix}[{i}]"))
            else:
                out.extend(_drf_details(value, prefix))
    else:
        code = getattr(data, "code", "invalid")
        out.append({"path": prefix, "code": str(code), "message": str(data)})
    return out


def api_exception_handler(exc, context):
    """DRF exception handler: every error in one shape; refusals go to the access log."""
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(
            f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
        )
    if isinstance(exc, ApplicationError):
        from console.policy import denial_record

        request = context.get("request")
        denial_record(exc, path=getattr(request, "path", ""))
        return error_response(exc)
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound("Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, drf_exceptions.ValidationError):
        payload = {
            "code": "validation_failed",
            "message": "The request is not valid.",
            "details": _drf_details(exc.detail),
        }
    elif isinstance(exc, drf_exceptions.ParseError):
        payload = {"code": "malformed_json", "message": str(exc.detail), "details": []}
    else:
        detail = exc.detail if isinstance(exc, drf_exceptions.APIException) else str(exc)
        code = getattr(exc, "default_code", "error")
        if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
            code = "not_authenticated"
        payload = {"code": str(code), "message": str(detail), "details": []}
    response.data = {"error": payload}
    return response

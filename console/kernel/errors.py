"""One family of application errors, mapped once to API errors and to UI messages.

API error shape (docs/runtime-contract.md): {"error": {"code", "message", "details": [{path, code, message}]}}
"""

from __future__ import annotations

from typing import Any

from context_runtime.findings import Finding
from django.urls import reverse
from rest_framework.response import Response


class ApplicationError(Exception):
    status = 400
    code = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        details: list[Finding | dict] | None = None,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.details = [d.as_dict() if isinstance(d, Finding) else d for d in details or []]
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


class NotAuthenticated(ApplicationError):
    """No valid credential: 401 (a runtime token, or a personal token on the operator API)."""

    status = 401
    code = "not_authenticated"


class ReauthenticationRequired(Exception):
    """A dangerous action asked of a session whose person last proved who they are too long
    ago (console.kernel.sessions.require_recent_authentication). Deliberately no
    ApplicationError: views turn those into a message on their own page, while this one must
    reach console.middleware.SessionLifetimeMiddleware, which asks for the password and runs
    the same action again. The API answers it as `as_error()` (401)."""

    code = "reauthentication_required"

    def __init__(self, message: str, *, action: str, window_minutes: int):
        super().__init__(message)
        self.message = message
        self.action = action
        self.window_minutes = window_minutes

    def as_error(self) -> ApplicationError:
        return NotAuthenticated(
            self.message,
            code=self.code,
            extra={"reauthenticate_url": reverse("reauthenticate"), "action": self.action},
        )


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


class TooManyRequests(ApplicationError):
    """A bound reached (not a stale write): the same request may succeed later."""

    status = 429
    code = "too_many_requests"


class PayloadTooLarge(ApplicationError):
    status = 413
    code = "payload_too_large"


class Unavailable(ApplicationError):
    """Something the console depends on (its database) does not answer: retry later."""

    status = 503
    code = "unavailable"
    retry_after_seconds = 5


class InternalError(ApplicationError):
    status = 500
    code = "internal_error"


def error_headers(exc: ApplicationError) -> dict[str, str]:
    retry = getattr(exc, "retry_after_seconds", None)
    return {"Retry-After": str(retry)} if retry else {}


def error_response(exc: ApplicationError) -> Response:
    return Response(exc.as_payload(), status=exc.status, headers=error_headers(exc))


def drf_details(data: Any, prefix: str = "") -> list[dict]:
    """Flatten DRF's nested error dicts into [{path, code, message}]."""
    out: list[dict] = []
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.extend(drf_details(value, "" if key == "non_field_errors" else path))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            if isinstance(value, dict | list):
                out.extend(drf_details(value, f"{prefix}[{i}]"))
            else:
                out.extend(drf_details(value, prefix))
    else:
        code = getattr(data, "code", "invalid")
        out.append({"path": prefix, "code": str(code), "message": str(data)})
    return out

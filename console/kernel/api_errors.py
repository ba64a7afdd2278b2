"""DRF's exception handler: every API error in the one shape (console/kernel/errors.py)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.views import exception_handler, set_rollback

from console.kernel.errors import (
    ApplicationError,
    InternalError,
    ReauthenticationRequired,
    Unavailable,
    drf_details,
    error_response,
)
from console.kernel.limits import too_large

log = logging.getLogger(__name__)

# SCIM 2.0 (RFC 7644 §3.12) has its own error shape and media type: its clients (Okta, Entra
# ID) parse only that, so every refusal under /scim/ is in it — the SCIM views' own and those
# made before any view (a NUL in the address, an unknown ?format=, a fault).
SCIM_ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
SCIM_MEDIA = "application/scim+json"


def scim_error_body(status: int, detail: str, scim_type: str | None = None) -> dict:
    body = {"schemas": [SCIM_ERROR_SCHEMA], "status": str(status), "detail": detail}
    if scim_type:
        body["scimType"] = scim_type
    return body


def machine_error(path: str, error: ApplicationError) -> tuple[dict, str] | None:
    """The error body and content type a client of `path` parses: SCIM's under /scim/, the
    console's one shape under /api/; None for a page (it gets the error page)."""
    if path.startswith("/scim/"):
        scim_type = "invalidValue" if error.status == 400 else None
        return scim_error_body(error.status, error.message, scim_type), SCIM_MEDIA
    if path.startswith("/api/"):
        return error.as_payload(), "application/json"
    return None


def unexpected_error(exc: BaseException) -> ApplicationError:
    """What an API client is told of an exception nothing handled: a database that does not
    answer (connection lost, server down, a deadlock) is worth a retry, anything else is a
    fault of ours. Never the traceback or the settings, whatever DEBUG says: runtimes parse
    the error shape, and the debug page is not for them (it goes to the log)."""
    if isinstance(exc, OperationalError | InterfaceError):
        return Unavailable(
            "The console's database could not answer (unavailable, or it broke off a "
            "conflicting transaction); retry shortly.",
            code="database_unavailable",
        )
    return InternalError(
        "The console failed to answer this request; its X-Request-ID names it in the log."
    )


def api_exception_handler(exc, context):
    """DRF exception handler: every error in one shape; refusals go to the access log."""
    if isinstance(exc, RequestDataTooBig):
        exc = too_large("The request body", settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if isinstance(exc, ReauthenticationRequired):  # a session's dangerous action: 401
        exc = exc.as_error()
    if isinstance(exc, ApplicationError):
        return error_response(exc)
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound("Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:  # not an API exception: ours to shape (and to log, since it is caught)
        request = context.get("request")
        log.error("unexpected error answering %s", getattr(request, "path", "?"), exc_info=exc)
        set_rollback()
        return error_response(unexpected_error(exc))
    if isinstance(exc, drf_exceptions.ValidationError):
        payload = {
            "code": "validation_failed",
            "message": "The request is not valid.",
            "details": drf_details(exc.detail),
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

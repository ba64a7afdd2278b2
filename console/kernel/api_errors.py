"""DRF's exception handler: every API error in the one shape (console/kernel/errors.py)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.views import exception_handler

from console.kernel.errors import ApplicationError, drf_details, error_response
from console.kernel.limits import too_large


def api_exception_handler(exc, context):
    """DRF exception handler: every error in one shape; refusals go to the access log."""
    if isinstance(exc, RequestDataTooBig):
        exc = too_large("The request body", settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if isinstance(exc, ApplicationError):
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

"""Per-request context that services read without being handed the request: the request id
(for audit rows and logs) and the client IP."""

from __future__ import annotations

import contextvars
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestContext:
    request_id: str = ""
    ip: str | None = None


current_request: contextvars.ContextVar[RequestContext] = contextvars.ContextVar(
    "console_request",
    default=RequestContext(),  # noqa: B039 - frozen dataclass, immutable
)


def client_ip(request) -> str | None:
    # Behind a proxy, set the proxy to overwrite X-Forwarded-For; the first hop is the client.
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    return (forwarded.split(",")[0].strip() or request.META.get("REMOTE_ADDR")) or None


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")[:100]
        request_id = incoming if incoming.isprintable() and incoming else uuid.uuid4().hex
        request.request_id = request_id
        token = current_request.set(RequestContext(request_id=request_id, ip=client_ip(request)))
        try:
            response = self.get_response(request)
        finally:
            current_request.reset(token)
        response["X-Request-ID"] = request_id
        return response


class ApplicationErrorMiddleware:
    """Pages: an ApplicationError raised by a view or service becomes a readable error page
    (or an htmx fragment) with its status — 404 out of scope, 403 forbidden, 409 conflict…"""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        from django.template.response import TemplateResponse

        from console.errors import ApplicationError
        from console.policy import denial_record

        if not isinstance(exception, ApplicationError):
            return None
        denial_record(exception, path=request.path)  # refusals go to the access log (once)
        if request.path.startswith("/api/"):
            from django.http import JsonResponse

            return JsonResponse(exception.as_payload(), status=exception.status)
        template = (
            "_components/error_fragment.html" if getattr(request, "htmx", False) else "error.html"
        )
        response = TemplateResponse(
            request, template, {"error": exception}, status=exception.status
        )
        return response.render()

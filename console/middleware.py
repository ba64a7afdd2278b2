"""Request middleware: a request id on every request and response, refusals written to the
access log when the request ends, and application errors raised by page views turned into
readable pages."""

from __future__ import annotations

import uuid

from django.http import JsonResponse
from django.template.response import TemplateResponse

from console.errors import ApplicationError
from console.policy import denials_logged
from console.request_context import RequestContext, client_ip, current_request


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")[:100]
        request_id = incoming if incoming.isprintable() and incoming else uuid.uuid4().hex
        request.request_id = request_id
        token = current_request.set(
            RequestContext(request_id=request_id, ip=client_ip(request), path=request.path)
        )
        try:
            with denials_logged():
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
        if not isinstance(exception, ApplicationError):
            return None
        if request.path.startswith("/api/"):
            return JsonResponse(exception.as_payload(), status=exception.status)
        template = (
            "_components/error_fragment.html" if getattr(request, "htmx", False) else "error.html"
        )
        response = TemplateResponse(
            request, template, {"error": exception}, status=exception.status
        )
        return response.render()

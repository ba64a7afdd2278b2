"""Request middleware: a request id on every request and response, refusals written to the
access log when the request ends, addresses no stored value can match refused up front,
sessions held to their idle and absolute limits (and a password asked before dangerous
actions), application errors raised by page views turned into readable pages, and every
error under /api/ in the API's JSON shape, whatever DEBUG says."""

from __future__ import annotations

import json
import sys
import uuid
from http import HTTPStatus
from urllib.parse import urlencode, urlsplit

from django.contrib.auth import logout
from django.core.signals import got_request_exception
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse

from console.accounts.forms import REAUTH_FIELD, ReauthenticationForm
from console.kernel.api_errors import machine_error, unexpected_error
from console.kernel.errors import (
    ApplicationError,
    ReauthenticationRequired,
    ValidationFailed,
    error_headers,
)
from console.kernel.policy import denials_logged
from console.kernel.request_context import RequestContext, client_ip, current_request
from console.kernel.sessions import (
    POLL_HEADER,
    Expiry,
    authentication_recorded,
    current_session,
    session_expiry,
    session_expiry_record,
    session_touch,
)
from console.views import reauthentication_page, session_ended_words


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


def error_response(request, exception: ApplicationError):
    """The machine error shape of the path (the API's, SCIM's), else the error page (or its
    htmx fragment)."""
    machine = machine_error(request.path, exception)
    if machine is not None:
        body, content_type = machine
        return JsonResponse(body, status=exception.status, content_type=content_type)
    template = (
        "_components/error_fragment.html" if getattr(request, "htmx", False) else "error.html"
    )
    return TemplateResponse(
        request, template, {"error": exception}, status=exception.status
    ).render()


def nul_in_address(request) -> str | None:
    """Where the address carries a NUL character ("path" or the query parameter's name), or
    None. PostgreSQL text cannot hold one, so no key, id or filter value can match it, and
    passing it on makes the database driver fail."""
    if "\x00" in request.path:
        return "path"
    for name, values in request.GET.lists():
        if "\x00" in name or any("\x00" in value for value in values):
            return name.replace("\x00", "") or "query"
    return None


class UnstorableInputMiddleware:
    """Refuses (400, before any view) an address with a NUL character in its path or query:
    one check for every page and API operation, instead of one per filter and lookup."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = nul_in_address(request)
        if where is None:
            return self.get_response(request)
        return error_response(
            request,
            ValidationFailed(
                "The address contains a NUL character (%00), which no key, id or filter holds.",
                code="invalid_character",
                details=[{"path": where, "code": "invalid_character", "message": "NUL (%00)."}],
            ),
        )


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


class SessionLifetimeMiddleware:
    """Every request of a signed-in session (console.kernel.sessions): past its idle timeout
    or its absolute lifetime the session ends (`auth.session_expire` in the access log) and
    the answer says so — a page goes to the signed-out page, htmx gets HX-Redirect there, the
    API a 401 `session_expired`; else the activity is noted and the session is what
    `require_recent_authentication` reads. A form posted from the confirm-your-password page
    has its password checked before its view runs; a dangerous action refused for want of a
    recent sign-in (ReauthenticationRequired) answers that page (pages, htmx)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.user.is_authenticated:
            return self.get_response(request)
        expiry = session_expiry(request.session)
        if expiry is not None:
            ended = self._ended(request, expiry)
            if ended is not None:
                return ended
            return self.get_response(request)
        session_touch(request.session, polled=POLL_HEADER in request.headers)
        token = current_session.set(request.session)
        try:
            return self.get_response(request)
        finally:
            current_session.reset(token)

    def _ended(self, request, expiry: Expiry):
        session_expiry_record(request.user, expiry)
        logout(request)
        if _is_api(request) and request.headers.get("Authorization", "").startswith("Bearer "):
            return None  # answered on its token, whose own rules apply
        words = session_ended_words(expiry.why)
        if _is_api(request):
            return JsonResponse(
                {
                    "error": {
                        "code": "session_expired",
                        "message": f"{words} Sign in again.",
                        "details": [],
                        "why": expiry.why,
                        "sign_in_url": reverse("login"),
                    }
                },
                status=401,
            )
        where = ""
        if getattr(request, "htmx", False):
            current = urlsplit(request.htmx.current_url or "")
            where = current.path + (f"?{current.query}" if current.query else "")
        elif request.method == "GET":
            where = request.get_full_path()
        query = {"why": expiry.why, **({"next": where} if where else {})}
        url = f"{reverse('signed-out')}?{urlencode(query)}"
        if getattr(request, "htmx", False):
            return HttpResponse(status=401, headers={"HX-Redirect": url})
        return redirect(url)

    def process_view(self, request, view_func, view_args, view_kwargs):
        """A form posted with the confirm page's password (after CSRF, which runs first): a
        right password is recorded and the view runs; a wrong one answers the page again,
        the view not run."""
        if (
            request.method != "POST"
            or _is_api(request)
            or not request.user.is_authenticated
            or REAUTH_FIELD not in request.POST
        ):
            return None
        form = ReauthenticationForm(request, data=request.POST)
        if form.is_valid():
            authentication_recorded(request.session)
            return None
        return reauthentication_page(
            request, message="Confirm your password to carry on with what you asked.", form=form
        )

    def process_exception(self, request, exception):
        if isinstance(exception, ReauthenticationRequired) and not _is_api(request):
            return reauthentication_page(request, message=exception.message)
        return None


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
        return error_response(request, exception)


_API_CODES = {400: "bad_request", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


def _status_error(status: int) -> ApplicationError:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    error = ApplicationError(f"{phrase}.", code=_API_CODES.get(status, "error"))
    error.status = status
    return error


def _remember_exception(sender, request=None, **kwargs) -> None:
    """Django is about to render an exception nothing caught: keep it for ApiErrorMiddleware."""
    if request is not None:
        request.unexpected_exception = sys.exc_info()[1]


def _is_json(content_type: str) -> bool:
    """application/json or a JSON-based type (the schema's application/vnd.oai.openapi+json):
    a DRF view's own error answer, shaped already."""
    media_type = content_type.split(";")[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


class ApiErrorMiddleware:
    """Outermost. Under /api/, an error answer Django rendered itself — an exception no view
    caught (a middleware's, say, while the database is down), an unknown address — becomes
    the API's JSON error: with DEBUG on Django would send its debug page (the settings and a
    traceback) to a runtime that can only parse the error shape. DRF views shape their own
    errors (console.kernel.api_errors); this catches what happens outside them."""

    def __init__(self, get_response):
        self.get_response = get_response
        got_request_exception.connect(_remember_exception, dispatch_uid="api-error-shape")

    def __call__(self, request):
        response = self.get_response(request)
        if (
            not request.path.startswith(("/api/", "/scim/"))
            or response.status_code < 400
            or response.streaming
            or _is_json(response.get("Content-Type", ""))
        ):
            return response
        exception = getattr(request, "unexpected_exception", None)
        if exception is not None:
            error = unexpected_error(exception)
        else:
            error = _status_error(response.status_code)
        body, content_type = machine_error(request.path, error)
        response.status_code = error.status
        response.content = json.dumps(body).encode()
        response["Content-Type"] = content_type
        if response.has_header("Content-Length"):
            response["Content-Length"] = str(len(response.content))
        for name, value in error_headers(error).items():
            response[name] = value
        return response

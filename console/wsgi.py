"""WSGI entry point: Django, with a dispatcher in front of it for the one hot route.

`GET|HEAD /api/v1/runtime/config/<agent>` is what every runtime replica polls. When this
process's mirror holds the token's identity and the agent's pre-rendered payload, the
dispatcher answers it without Django's request cycle (`strategies.runtime.api.config_mirrored`:
the same authentication, scope, ETag/304 and error shape), adding the headers the middleware
stack adds on that route (X-Request-ID, the security headers, Content-Length). The answer of a
token for an agent is built once and kept while the mirror vouches for both (no invalidation
since, within the entries' lifetime: a revocation or a publish ends it at once), so a request
costs a dict lookup, a comparison of ETags and a fresh request id (docs/PERFORMANCE.md). Everything
else — other routes and methods, a token or payload not mirrored, a host Django would refuse,
an HTTP request that must be redirected to HTTPS, a middleware stack it was not checked
against — goes to Django unchanged. tests/integration/test_config_dispatcher.py compares
both answers byte for byte.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_application = get_wsgi_application()

# Django is set up only now (get_wsgi_application), so these imports come after it.
from django.conf import settings  # noqa: E402
from django.core.exceptions import DisallowedHost  # noqa: E402
from django.core.handlers.wsgi import WSGIRequest  # noqa: E402
from django.urls import reverse  # noqa: E402

from console.ingest_server import IngestBound  # noqa: E402
from console.kernel.database_role import refuse_to_start_as_privileged_role  # noqa: E402
from strategies.delivery.config import mirror  # noqa: E402
from strategies.runtime.api import MirroredConfig, config_mirrored  # noqa: E402
from strategies.runtime.auth import LAST_USED_EVERY_SECONDS  # noqa: E402
from strategies.runtime.authentication import etag_matches  # noqa: E402

refuse_to_start_as_privileged_role()

log = logging.getLogger(__name__)

# What each middleware does on the config route (a GET or HEAD of a login_not_required view
# that touches no session, cookie or message, and catches its own errors), checked one by one.
# A stack with anything else turns the dispatcher off: a new middleware may change answers.
MIDDLEWARE_ACCOUNTED_FOR = {
    # reshapes error answers Django rendered itself; the dispatcher's are in the shape already
    "console.middleware.ApiErrorMiddleware",
    # headers (below); the HTTPS redirect → Django
    "django.middleware.security.SecurityMiddleware",
    # serves STATIC_URL only
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # the session is read (LoginRequiredMiddleware asks for the user): Vary: Cookie (below);
    # a request with cookies → Django (a stale session cookie gets a deleting Set-Cookie)
    "django.contrib.sessions.middleware.SessionMiddleware",
    # host check (below), Content-Length; PREPEND_WWW / DISALLOWED_USER_AGENTS → off
    "django.middleware.common.CommonMiddleware",
    # GET: nothing; a cookie only when a token is asked for
    "django.middleware.csrf.CsrfViewMiddleware",
    # the user is lazy
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # the view is login_not_required (the user is still looked at: see sessions)
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    # wraps the (lazy) user to say whether a second factor was used; reads the session's
    # device only for a signed-in user — a runtime's request is anonymous, nothing happens
    "django_otp.middleware.OTPMiddleware",
    # stores only messages that were added
    "django.contrib.messages.middleware.MessageMiddleware",
    # X-Frame-Options (below)
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # sets request.htmx
    "django_htmx.middleware.HtmxMiddleware",
    # X-Request-ID (below); a runtime's refusals are not access-logged
    "console.middleware.RequestIdMiddleware",
    # a NUL in the path or query → Django (below), which answers 400
    "console.middleware.UnstorableInputMiddleware",
    # exceptions only; the view answers its own
    "console.middleware.ApplicationErrorMiddleware",
    # acts on locked sign-ins only
    "axes.middleware.AxesMiddleware",
    # acts on a signed-in session only: a runtime's request carries no cookie (one that does
    # goes to Django, above), so its user is anonymous and nothing happens
    "console.middleware.SessionLifetimeMiddleware",
}
_REASONS = {200: "200 OK", 304: "304 Not Modified", 403: "403 Forbidden", 404: "404 Not Found"}
_HOSTS_REMEMBERED = 256
_ANSWERS_REMEMBERED = 10_000  # only tokens the mirror holds as active fill it


class RequestIds:
    """X-Request-ID when the client sent none: 32 hex digits like RequestIdMiddleware's
    uuid4().hex, unique without a random draw per request (uuid4 was the largest single cost
    of a mirrored answer): 80 random bits per process, drawn again in a forked child, then a
    counter. A fast-path answer is logged nowhere, so nothing needs the id to be unguessable."""

    def __init__(self):
        self._forked()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.prefix = os.urandom(10).hex()
        self.counter = itertools.count()

    def new(self) -> str:
        return "%s%012x" % (self.prefix, next(self.counter))  # noqa: UP031 - the cheapest


class _Answer:
    """A mirrored answer with the middleware's headers, per (Authorization, path, secure),
    in Django's order; the X-Request-ID slot of each list (at `*_id_at`) is filled per request."""

    __slots__ = (
        "generation", "expires_at", "etag", "body",
        "get", "head", "not_modified", "get_id_at", "not_modified_id_at",
    )  # fmt: skip

    def __init__(self, config: MirroredConfig, frame: list, outer: list, now: float):
        self.generation = config.generation
        # config_mirrored noted the token's use: a new answer at least as often as note_use
        # writes keeps `last_used_at` moving without a call per request.
        self.expires_at = min(config.expires_at, now + LAST_USED_EVERY_SECONDS)
        self.etag = config.etag
        self.body = config.body
        request_id = ("X-Request-ID", "")
        self.get = [
            *config.headers_200, request_id, *frame, ("Content-Length", str(len(config.body))),
            *outer,
        ]  # fmt: skip
        self.head = [*config.headers_200, request_id, *frame, ("Content-Length", "0"), *outer]
        self.get_id_at = len(config.headers_200)
        self.not_modified = [
            *config.headers_304,
            request_id,
            *frame,
            ("Content-Length", "0"),
            *outer,
        ]
        self.not_modified_id_at = len(config.headers_304)


class ConfigDispatcher:
    """The WSGI application: the config route from the mirror, everything else to Django."""

    def __init__(self, app):
        self.app = app
        # "/api/v1/runtime/config/" from the URL map (the one place that names the route).
        self.prefix = reverse("runtime-config", kwargs={"agent": "-"}).removesuffix("-")
        self.enabled = self._stack_checked()
        self._hosts: dict[tuple, bool] = {}
        self._secure_headers = self._middleware_headers(secure=True)
        self._plain_headers = self._middleware_headers(secure=False)
        # Read once, like the headers above: a dispatcher serves one settings module.
        self._proxy_ssl_header = settings.SECURE_PROXY_SSL_HEADER
        self._ssl_redirect = settings.SECURE_SSL_REDIRECT
        self._forwarded_host = settings.USE_X_FORWARDED_HOST
        self._answers: dict[tuple, _Answer] = {}
        self._request_ids = RequestIds()

    @staticmethod
    def _stack_checked() -> bool:
        unknown = [m for m in settings.MIDDLEWARE if m not in MIDDLEWARE_ACCOUNTED_FOR]
        if unknown or settings.PREPEND_WWW or settings.DISALLOWED_USER_AGENTS:
            log.warning(
                "config dispatcher off: check what %s does on the config route, then add it "
                "to console.wsgi.MIDDLEWARE_ACCOUNTED_FOR",
                ", ".join(unknown) or "PREPEND_WWW / DISALLOWED_USER_AGENTS",
            )
            return False
        return True

    @staticmethod
    def _middleware_headers(*, secure: bool) -> tuple[list, list]:  # (frame, outer)
        """What the middleware adds after the view, in its order: XFrameOptionsMiddleware's
        header, then (after CommonMiddleware's Content-Length) SessionMiddleware's Vary and
        SecurityMiddleware's headers. RequestIdMiddleware's X-Request-ID comes first."""
        middleware = settings.MIDDLEWARE
        frame = []
        if "django.middleware.clickjacking.XFrameOptionsMiddleware" in middleware:
            frame.append(("X-Frame-Options", settings.X_FRAME_OPTIONS.upper()))
        security = []
        if {
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.LoginRequiredMiddleware",
        } <= set(middleware):
            security.append(("Vary", "Cookie"))
        if "django.middleware.security.SecurityMiddleware" in middleware:
            if secure and settings.SECURE_HSTS_SECONDS:
                sts = f"max-age={settings.SECURE_HSTS_SECONDS}"
                if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
                    sts += "; includeSubDomains"
                if settings.SECURE_HSTS_PRELOAD:
                    sts += "; preload"
                security.append(("Strict-Transport-Security", sts))
            if settings.SECURE_CONTENT_TYPE_NOSNIFF:
                security.append(("X-Content-Type-Options", "nosniff"))
            policy = settings.SECURE_REFERRER_POLICY
            if policy:
                values = (
                    [v.strip() for v in policy.split(",")] if isinstance(policy, str) else policy
                )
                security.append(("Referrer-Policy", ",".join(values)))
            if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
                security.append(
                    ("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY)
                )
        return frame, security

    def _is_secure(self, environ) -> bool:
        """HttpRequest.is_secure, on the environ."""
        if self._proxy_ssl_header:
            header, secure_value = self._proxy_ssl_header
            value = environ.get(header)
            if value is not None:
                return value.split(",", 1)[0].strip() == secure_value
        return environ.get("wsgi.url_scheme") == "https"

    def _host_allowed(self, environ) -> bool:
        """Whether Django's request.get_host() accepts this request's host (remembered)."""
        host = environ.get("HTTP_HOST")
        if host is None or self._forwarded_host:
            # get_host() reads HTTP_HOST alone when it is there and X-Forwarded-Host is off
            host = (
                host,
                environ.get("HTTP_X_FORWARDED_HOST"),
                environ.get("SERVER_NAME"),
                environ.get("SERVER_PORT"),
            )
        allowed = self._hosts.get(host)
        if allowed is None:
            try:
                WSGIRequest(dict(environ)).get_host()  # a copy: WSGIRequest writes to it
                allowed = True
            except DisallowedHost:
                allowed = False
            if len(self._hosts) < _HOSTS_REMEMBERED:
                self._hosts[host] = allowed
        return allowed

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if self.enabled and path.startswith(self.prefix):
            method = environ.get("REQUEST_METHOD")
            if method == "GET" or method == "HEAD":
                answer = self._config(environ, path, method)
                if answer is not None:
                    status, headers, body = answer
                    start_response(status, headers)
                    return [body]  # a list: granian's fast path (one buffer, no iterator)
        return self.app(environ, start_response)

    def _config(self, environ, path: str, method: str):
        if "HTTP_COOKIE" in environ:
            return None  # a browser: sessions and CSRF cookies are Django's business
        query = environ.get("QUERY_STRING")
        if query and "%00" in query:
            return None  # UnstorableInputMiddleware refuses it (400)
        secure = self._is_secure(environ)
        if (self._ssl_redirect and not secure) or not self._host_allowed(environ):
            return None  # Django redirects or refuses
        # The raw header is the key: hashing it is what the cache saves. Only tokens the
        # mirror holds as active get an entry, for at most the mirror entries' lifetime.
        key = (environ.get("HTTP_AUTHORIZATION"), path, secure)
        answer = self._answers.get(key)
        now = mirror.clock()
        if (
            answer is None
            or answer.generation != mirror.generation
            or now >= answer.expires_at
            or not mirror.healthy
        ):
            answer = self._answer(environ, key, path, secure, now)
            if not isinstance(answer, _Answer):
                return answer  # None (→ Django) or a refusal
        incoming = environ.get("HTTP_X_REQUEST_ID")
        if incoming:
            incoming = incoming[:100]
            request_id = incoming if incoming.isprintable() else self._request_ids.new()
        else:
            request_id = self._request_ids.new()
        if_none_match = environ.get("HTTP_IF_NONE_MATCH")
        if if_none_match and (
            if_none_match == answer.etag or etag_matches(if_none_match, answer.etag)
        ):
            headers = answer.not_modified.copy()
            headers[answer.not_modified_id_at] = ("X-Request-ID", request_id)
            return "304 Not Modified", headers, b""
        headers = (answer.get if method == "GET" else answer.head).copy()
        headers[answer.get_id_at] = ("X-Request-ID", request_id)
        return "200 OK", headers, answer.body if method == "GET" else b""

    def _answer(self, environ, key: tuple, path: str, secure: bool, now: float):
        """A new `_Answer` from the mirror (remembered), a refusal with the middleware's
        headers (not remembered: rare), or None when Django must answer."""
        agent = path[len(self.prefix) :]
        if not agent or "/" in agent or not agent.isascii():
            return None  # not this route, or a path Django decodes differently
        if "\x00" in agent:
            return None  # UnstorableInputMiddleware refuses it (400)
        frame, outer = self._secure_headers if secure else self._plain_headers
        found = config_mirrored(environ.get("HTTP_AUTHORIZATION", ""), agent)
        if found is None:
            return None
        if not isinstance(found, MirroredConfig):
            status, headers, body = found
            incoming = environ.get("HTTP_X_REQUEST_ID", "")[:100]
            request_id = incoming if incoming.isprintable() and incoming else uuid.uuid4().hex
            headers = [
                *headers,
                ("X-Request-ID", request_id),
                *frame,
                ("Content-Length", str(len(body))),
                *outer,
            ]
            return _REASONS[status], headers, body
        answer = _Answer(found, frame, outer, now)
        if len(self._answers) >= _ANSWERS_REMEMBERED:
            self._answers.clear()
        self._answers[key] = answer
        return answer


# The runtime ingest routes get a small bound here (console.ingest_server): a flood of trace
# batches posted to this server cannot take the threads that answer config reads.
application = IngestBound(ConfigDispatcher(django_application))

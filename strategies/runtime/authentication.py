"""The one way a runtime endpoint authenticates (docs/runtime-contract.md "Authentication"):
`Authorization: Bearer <runtime token>`; missing, unknown or revoked → 401; valid without the
capability → 403. Config, manifest and trace ingest all go through `RuntimeTokenAuthentication`
— declared with `runtime_view`, called as `identify` by the config view, or as
`identify_mirrored` by the config dispatcher in front of Django.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.utils.http import parse_etags
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import BasePermission

from strategies.runtime.auth import (
    NotAuthenticated,
    RuntimeIdentity,
    authorize_runtime,
    bearer_secret,
    bearer_secret_of,
    cached_identity,
    mirrored_identity,
    note_refused,
)


class RuntimeTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <runtime token>` → the token's RuntimeIdentity (cached)."""

    @staticmethod
    def identify(request, capability: str | None = None) -> RuntimeIdentity:
        """The identity of the request's token (401), holding `capability` if named (403)."""
        request = getattr(request, "_request", request)  # a DRF request wraps Django's
        secret = bearer_secret(request)
        identity = cached_identity(secret)
        if identity is None:
            note_refused(secret)
            raise NotAuthenticated("The runtime token is unknown or revoked.")
        return authorize_runtime(identity, capability) if capability else identity

    @staticmethod
    def identify_mirrored(
        authorization: str, capability: str
    ) -> tuple[RuntimeIdentity, float] | None:
        """`identify` from this process's mirror alone, for the config dispatcher in front of
        Django (console/wsgi.py): (the identity holding `capability` (403 as `identify`), the
        time on the mirror's clock until which the mirror vouches for it), or None when the
        mirror cannot tell — no bearer token, a token unknown, revoked or just not mirrored —
        and `identify` must answer. No database; the use is noted in Redis."""
        try:
            secret = bearer_secret_of(authorization)
        except NotAuthenticated:
            return None
        entry = mirrored_identity(secret)
        if entry is None:
            return None
        identity, expires_at = entry
        return authorize_runtime(identity, capability, database=False), expires_at

    def authenticate(self, request):
        return self.identify(request), None

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="runtime"'


class RuntimeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "strategies.runtime.authentication.RuntimeTokenAuthentication"
    name = "runtimeToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A runtime token (cc_rt_…) for one environment; see "
            "docs/runtime-contract.md.",
        }


def _holds(capability: str | tuple[str, ...]):
    class HoldsCapability(BasePermission):
        def has_permission(self, request, view) -> bool:
            authorize_runtime(request.user, capability)  # 403 in the error shape
            return True

    return HoldsCapability


def runtime_view(methods, *, capability: str | tuple[str, ...]):
    """A runtime endpoint: token auth only (no session, no CSRF, no login redirect), and the
    token must hold `capability` (a tuple: any of them); the view gets the RuntimeIdentity as
    `request.user`."""

    def decorate(view):
        view = permission_classes([_holds(capability)])(view)
        view = authentication_classes([RuntimeTokenAuthentication])(view)
        return login_not_required(api_view(methods)(view))

    return decorate


def etag_matches(header: str, etag: str) -> bool:
    """If-None-Match (RFC 9110 §13.1.2, weak comparison) through Django's own parser."""
    tags = parse_etags(header) if header else []
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)

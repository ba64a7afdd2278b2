"""Personal API tokens on the operator API (/api/v1/ except /api/v1/runtime/, whose views
declare their own runtime-token authentication).

`Authorization: Bearer ccp_…` → the token's user, carrying the token (console.kernel.policy narrows
the user's grants to its scope; the logs name it). A bearer header that is not a valid
personal token — unknown, expired, revoked, a runtime token, a deactivated user — is 401 with
`WWW-Authenticate: Bearer`, and never falls back to the session. Without a bearer header the
next class (the browser's session, with its CSRF check) decides. Tokens need no CSRF token:
a browser never sends one by itself.
"""

from __future__ import annotations

from django.utils.dateformat import format as date_format
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed

from console.accounts.personal_tokens import (
    TOKEN_PREFIX,
    personal_token_for_secret,
    personal_token_note_use,
)
from console.kernel.audit import PERSONAL_TOKEN_ATTR
from console.kernel.credentials import bearer_value


class PersonalTokenAuthentication(BaseAuthentication):
    def authenticate(self, request):
        secret = bearer_value(request.META.get("HTTP_AUTHORIZATION", ""))
        if secret is None:
            return None  # no bearer token: the session decides
        if not secret.startswith(TOKEN_PREFIX):
            raise AuthenticationFailed(
                f"The operator API takes a personal API token ({TOKEN_PREFIX}…); runtime "
                "tokens are for /api/v1/runtime/."
            )
        token = personal_token_for_secret(secret)
        if token is None or token.state == "revoked":
            raise AuthenticationFailed("The personal token is unknown or revoked.")
        if token.state == "expired":
            raise AuthenticationFailed(
                f"The personal token “{token.name}” expired on "
                f"{date_format(token.expires_at, 'Y-m-d H:i')} UTC; create a new one."
            )
        user = token.user
        if not user.is_active:
            raise AuthenticationFailed("The token's user is deactivated.")
        personal_token_note_use(token)
        setattr(user, PERSONAL_TOKEN_ATTR, token)
        return user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


class PersonalTokenScheme(OpenApiAuthenticationExtension):
    target_class = "console.accounts.authentication.PersonalTokenAuthentication"
    name = "personalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": f"A personal API token ({TOKEN_PREFIX}…) made on your account "
            "page: what it may do is your grants narrowed to its scope.",
        }

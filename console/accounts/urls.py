"""Pages: the signed-in person's account (personal API tokens), and single sign-on's two
steps (console.accounts.oidc)."""

from __future__ import annotations

from django.urls import path

from console.accounts import oidc, saml, views
from console.kernel.policy import AUTHENTICATED, PUBLIC, Capability, Everywhere

urlpatterns = [
    path("login/sso/<str:provider>/", oidc.sso_start, name="sso-start"),
    path("login/sso/<str:provider>/callback/", oidc.sso_callback, name="sso-callback"),
    path(
        "login/sso/<str:provider>/reauthenticate/",
        oidc.sso_reauthenticate,
        name="sso-reauthenticate",
    ),
    path("login/saml/<str:provider>/", saml.saml_start, name="saml-start"),
    path("login/saml/<str:provider>/metadata/", saml.saml_metadata, name="saml-metadata"),
    path("login/saml/<str:provider>/acs/", saml.saml_acs, name="saml-acs"),
    path("login/saml/<str:provider>/sls/", saml.saml_sls, name="saml-sls"),
    path(
        "login/saml/<str:provider>/reauthenticate/",
        saml.saml_reauthenticate,
        name="saml-reauthenticate",
    ),
    path("account/", views.account, name="account"),
    path(
        "account/tokens/<int:pk>/revoke/",
        views.account_token_revoke,
        name="account-personaltoken-revoke",
    ),
    path("access/tokens/", views.personal_token_admin_list, name="personal-token-admin-list"),
    path(
        "access/tokens/<int:pk>/revoke/",
        views.personal_token_admin_revoke,
        name="access-personaltoken-revoke",
    ),
]

# Everyone manages their own tokens; another person's token is 404.
REQUIRED = {
    # Signing in: nobody is signed in yet (the provider's answer is checked, not the visitor).
    "sso-start": PUBLIC,
    "sso-callback": PUBLIC,
    # Confirm it's you at your provider: your own session only.
    "sso-reauthenticate": AUTHENTICATED,
    "saml-start": PUBLIC,
    "saml-metadata": PUBLIC,
    "saml-acs": PUBLIC,
    "saml-sls": PUBLIC,
    "saml-reauthenticate": AUTHENTICATED,
    "account": AUTHENTICATED,
    "account-personaltoken-revoke": AUTHENTICATED,
    "personal-token-admin-list": Everywhere(Capability.MANAGE_GRANTS),
    "access-personaltoken-revoke": Everywhere(Capability.MANAGE_GRANTS),
}

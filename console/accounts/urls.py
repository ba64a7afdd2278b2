"""Pages: the signed-in person's account (personal API tokens), and single sign-on's two
steps (console.accounts.oidc)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.urls import path
from django.views.i18n import JavaScriptCatalog

from console.accounts import oidc, saml, scim_views, second_factor_views, views
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
    # second factors and break-glass accounts (console.accounts.second_factor_views)
    path("login/second-factor/", second_factor_views.second_factor, name="second-factor"),
    path(
        "login/second-factor/key/begin/",
        second_factor_views.KeyAuthenticationBegin.as_view(),
        name="second-factor-key-authentication-begin",
    ),
    path(
        "login/second-factor/key/complete/",
        second_factor_views.KeyAuthenticationComplete.as_view(),
        name="second-factor-key-authentication-complete",
    ),
    path(
        "account/second-factor/app/",
        second_factor_views.account_totp_start,
        name="account-totp-start",
    ),
    path(
        "account/second-factor/app/confirm/",
        second_factor_views.account_totp_confirm,
        name="account-totp-confirm",
    ),
    path(
        "account/second-factor/key/begin/",
        second_factor_views.KeyRegistrationBegin.as_view(),
        name="account-key-registration-begin",
    ),
    path(
        "account/second-factor/key/complete/",
        second_factor_views.KeyRegistrationComplete.as_view(),
        name="account-key-registration-complete",
    ),
    path(
        "account/second-factor/recovery-codes/",
        second_factor_views.account_recovery_codes,
        name="account-recovery-codes",
    ),
    path(
        "account/second-factor/remove/",
        second_factor_views.account_second_factor_remove,
        name="account-second-factor-remove",
    ),
    path(
        "login/second-factor/jsi18n/",
        login_not_required(JavaScriptCatalog.as_view(packages=["django_otp_webauthn"])),
        name="second-factor-jsi18n",
    ),
    path(
        "reauthenticate/key/begin/",
        second_factor_views.ReauthKeyBegin.as_view(),
        name="reauth-key-authentication-begin",
    ),
    path(
        "reauthenticate/key/complete/",
        second_factor_views.ReauthKeyComplete.as_view(),
        name="reauth-key-authentication-complete",
    ),
    path("access/break-glass/", second_factor_views.break_glass_list, name="break-glass-list"),
    path("access/break-glass/mark/", second_factor_views.break_glass_mark, name="break-glass-mark"),
    path(
        "access/break-glass/<int:pk>/unmark/",
        second_factor_views.break_glass_unmark,
        name="break-glass-unmark",
    ),
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
    # SCIM provisioning (issue 33): its tokens, and who and what it provisioned.
    path("access/provisioning/", scim_views.scim_provisioning, name="scim-provisioning"),
    path(
        "access/provisioning/tokens/<int:pk>/revoke/",
        scim_views.scim_token_revoke,
        name="scim-token-revoke",
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
    # The second step of a sign-in: the pending account is judged, not the visitor.
    "second-factor": PUBLIC,
    "second-factor-key-authentication-begin": PUBLIC,
    "second-factor-key-authentication-complete": PUBLIC,
    "second-factor-jsi18n": PUBLIC,
    "reauth-key-authentication-begin": AUTHENTICATED,
    "reauth-key-authentication-complete": AUTHENTICATED,
    "account-totp-start": AUTHENTICATED,
    "account-totp-confirm": AUTHENTICATED,
    "account-key-registration-begin": AUTHENTICATED,
    "account-key-registration-complete": AUTHENTICATED,
    "account-recovery-codes": AUTHENTICATED,
    "account-second-factor-remove": AUTHENTICATED,
    "break-glass-list": Everywhere(Capability.MANAGE_GRANTS),
    "break-glass-mark": Everywhere(Capability.MANAGE_GRANTS),
    "break-glass-unmark": Everywhere(Capability.MANAGE_GRANTS),
    "account-personaltoken-revoke": AUTHENTICATED,
    "personal-token-admin-list": Everywhere(Capability.MANAGE_GRANTS),
    "access-personaltoken-revoke": Everywhere(Capability.MANAGE_GRANTS),
    "scim-provisioning": Everywhere(Capability.MANAGE_GRANTS),
    "scim-token-revoke": Everywhere(Capability.MANAGE_GRANTS),
}

"""Pages: the signed-in person's account (personal API tokens), and single sign-on's two
steps (console.accounts.oidc)."""

from __future__ import annotations

from django.urls import path

from console.accounts import oidc, scim_views, views
from console.kernel.policy import AUTHENTICATED, PUBLIC, Capability, Everywhere

urlpatterns = [
    path("login/sso/<str:provider>/", oidc.sso_start, name="sso-start"),
    path("login/sso/<str:provider>/callback/", oidc.sso_callback, name="sso-callback"),
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
    "account": AUTHENTICATED,
    "account-personaltoken-revoke": AUTHENTICATED,
    "personal-token-admin-list": Everywhere(Capability.MANAGE_GRANTS),
    "access-personaltoken-revoke": Everywhere(Capability.MANAGE_GRANTS),
    "scim-provisioning": Everywhere(Capability.MANAGE_GRANTS),
    "scim-token-revoke": Everywhere(Capability.MANAGE_GRANTS),
}

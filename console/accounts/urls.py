"""Pages: the signed-in person's account (personal API tokens)."""

from __future__ import annotations

from django.urls import path

from console.accounts import views
from console.kernel.policy import AUTHENTICATED, Capability, Everywhere

urlpatterns = [
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
    "account": AUTHENTICATED,
    "account-personaltoken-revoke": AUTHENTICATED,
    "personal-token-admin-list": Everywhere(Capability.MANAGE_GRANTS),
    "access-personaltoken-revoke": Everywhere(Capability.MANAGE_GRANTS),
}

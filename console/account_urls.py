"""Pages: the signed-in person's account (personal API tokens)."""

from __future__ import annotations

from django.urls import path

from console import account_views as views
from console.policy import AUTHENTICATED

urlpatterns = [
    path("account/", views.account, name="account"),
    path(
        "account/tokens/<int:pk>/revoke/",
        views.account_token_revoke,
        name="account-personaltoken-revoke",
    ),
]

# Everyone manages their own tokens; another person's token is 404.
REQUIRED = {
    "account": AUTHENTICATED,
    "account-personaltoken-revoke": AUTHENTICATED,
}

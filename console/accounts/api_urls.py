"""Operator API: your own personal API tokens (under /api/v1/)."""

from __future__ import annotations

from django.urls import path

from console.accounts import api
from console.kernel.policy import AUTHENTICATED

urlpatterns = [
    path("me/tokens/", api.personal_token_list, name="api-personaltoken-list"),
    path("me/tokens/<int:pk>/", api.personal_token_detail, name="api-personaltoken-detail"),
]

# Everyone manages their own tokens; another person's token is 404.
REQUIRED = {
    "api-personaltoken-list": AUTHENTICATED,
    "api-personaltoken-detail": AUTHENTICATED,
}

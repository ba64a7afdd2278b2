"""Refusals a person reads name the capability's label, never its code (issue 19, item 17c)."""

from __future__ import annotations

import pytest

from console.kernel.policy import CAPABILITY_LABELS, Capability
from tests.factories import user_with_grants

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("path", "capability"),
    [
        ("/access/roles/new/", Capability.MANAGE_GRANTS),
        ("/access/sign-in-locks/", Capability.MANAGE_GRANTS),
        ("/audit/", Capability.VIEW_AUDIT),
    ],
)
def test_forbidden_page__names_the_label_not_the_code(client, path, capability):
    client.force_login(user_with_grants("vera", viewer=None))

    response = client.get(path)

    assert response.status_code == 403
    page = response.content.decode()
    assert f"“{CAPABILITY_LABELS[capability]}”" in page
    assert capability.value not in page


def test_api_forbidden__names_the_label_not_the_code(client):
    client.force_login(user_with_grants("vera", viewer=None))

    response = client.post("/api/v1/roles/", {"name": "x"}, content_type="application/json")

    assert response.status_code == 403
    message = response.json()["error"]["message"]
    assert CAPABILITY_LABELS[Capability.MANAGE_GRANTS] in message
    assert "manage_grants" not in message

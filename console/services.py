"""Writes for roles, grants and other console-wide objects (one transaction each, audited)."""

from __future__ import annotations


def standard_roles_ensure(*, role_model=None) -> None:
    """Create the four standard roles if missing (migration, demo loader, test fixtures).
    Existing roles are left as they are: admins may have tuned them."""
    from console.policy import STANDARD_ROLES

    if role_model is None:
        from console.models import Role as role_model
    for name, (description, capabilities) in STANDARD_ROLES.items():
        role_model.objects.get_or_create(
            name=name,
            defaults={
                "description": description,
                "capabilities": [c.value for c in capabilities],
                "is_standard": True,
            },
        )

"""Demo users and grants (DEMO.md). Password for each demo user: `<username>-demo`."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from console.access.services import standard_roles_ensure
from console.kernel.models import Grant, Role
from console.kernel.policy import Capability
from strategies.catalog.models import Agent

# username → [(role name, agent key or None for all agents)]
DEMO_USERS: list[tuple[str, list[tuple[str, str | None]]]] = [
    ("ops", [("operator", "assistant_professional")]),
    ("ops2", [("operator", "assistant_professional"), ("approver", "assistant_professional")]),
    ("support", [("support", "assistant_professional")]),
    ("admin", [("admin", None)]),
    ("viewer", [("viewer", "assistant_lite")]),
]


def load(stdout=None) -> None:
    """Create the demo users and their grants; idempotent."""

    standard_roles_ensure()

    # ops2 is the second person for prod: an operator who may also approve.
    Role.objects.get_or_create(
        name="approver",
        defaults={
            "description": "May approve publishes to protected environments.",
            "capabilities": [Capability.VIEW_CONFIG.value, Capability.APPROVE.value],
        },
    )
    User = get_user_model()
    for username, grants in DEMO_USERS:
        user, created = User.objects.get_or_create(
            username=username, defaults={"email": f"{username}@demo.invalid"}
        )
        if created or not user.check_password(f"{username}-demo"):
            user.set_password(f"{username}-demo")
            user.save()
        for role_name, agent_key in grants:
            agent = Agent.objects.get(key=agent_key) if agent_key else None
            Grant.objects.get_or_create(
                user=user, role=Role.objects.get(name=role_name), agent=agent
            )

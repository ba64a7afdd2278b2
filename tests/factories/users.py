"""People: users with a known password, roles and grants.

Grants are written as rows (the way an admin's earlier work would have left them), so tests of
the access pages count only the grants and audit rows they make themselves.
"""

from __future__ import annotations

import factory
from django.conf import settings

from console.access.services import standard_roles_ensure
from console.kernel.models import Grant, Role
from console.kernel.policy import STANDARD_ROLES, Capability
from strategies.catalog.models import Agent

# Roles the tests use besides the four standard ones: name → capabilities.
EXTRA_ROLES: dict[str, list[str]] = {
    # the second person for protected environments: an operator who may also approve
    "approver": [Capability.VIEW_CONFIG.value, Capability.APPROVE.value],
    # someone trusted to hand out access, and nothing more
    "delegate": [Capability.VIEW_CONFIG.value, Capability.MANAGE_GRANTS.value],
}


def password_for(username: str) -> str:
    """The password every factory-made user has unless given another: `<username>-pass-1`."""
    return f"{username}-pass-1"


class UserFactory(factory.django.DjangoModelFactory):
    """A user who can sign in with `password_for(username)` (or the `password` given)."""

    class Meta:
        model = settings.AUTH_USER_MODEL
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.invalid")

    @factory.post_generation
    def password(self, create, extracted, **kwargs):
        self.set_password(extracted or password_for(self.username))
        if create:
            self.save(update_fields=["password"])


def standard_roles() -> dict[str, Role]:
    """The four standard roles (viewer, support, operator, admin), created if missing — the
    service the migrations and the demo loader use; transactional tests empty every table."""
    standard_roles_ensure()
    return {role.name: role for role in Role.objects.filter(name__in=STANDARD_ROLES)}


class RoleFactory(factory.django.DjangoModelFactory):
    """A console-wide role; without `capabilities` it grants nothing."""

    class Meta:
        model = Role
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"role_{n}")
    capabilities = factory.LazyFunction(list)


def role_named(name: str) -> Role:
    """A standard role, one of EXTRA_ROLES, or a role that already exists."""
    if name in STANDARD_ROLES:
        return standard_roles()[name]
    if name in EXTRA_ROLES:
        return RoleFactory(name=name, capabilities=list(EXTRA_ROLES[name]))
    return Role.objects.get(name=name)


class GrantFactory(factory.django.DjangoModelFactory):
    """A grant row: `agent=None` means all agents."""

    class Meta:
        model = Grant

    user = factory.SubFactory(UserFactory)
    role = factory.LazyFunction(lambda: role_named("viewer"))
    agent = None


def grant(user, role: str | Role, agent: Agent | str | None = None) -> Grant:
    """Give `user` the role (object or name) on `agent` (object, key, or None for all agents)."""
    if isinstance(role, str):
        role = role_named(role)
    if isinstance(agent, str):
        agent = Agent.objects.get(key=agent)
    return GrantFactory(user=user, role=role, agent=agent)


def user_with_grants(username: str | None = None, password: str | None = None, **grants):
    """A user and their grants: each keyword is a role name, its value the agent (object or
    key) or None for all agents — user_with_grants("ops", operator="assistant_professional")."""
    fields = {"username": username} if username else {}
    user = UserFactory(password=password, **fields)
    for role_name, agent in grants.items():
        grant(user, role_name, agent)
    return user

"""Accounts of people who sign in through an identity provider (issue 33): found by the
provider's subject, created just in time at the first sign-in, their mapped grants brought in
line with their groups at every sign-in (console.access.group_mappings.groups_sync)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Lower
from django.utils import timezone

from console.access.group_mappings import SyncResult, groups_sync
from console.accounts.models import ExternalIdentity, SamlAssertion, ScimUser
from console.kernel.audit import AuditAction, SystemActor, audit_record
from console.kernel.transactions import service_transaction

USERNAME_MAX = 150
# pg_advisory_xact_lock: accounts made at a first sign-in, one at a time.
_ACCOUNT_LOCK = 0x53_53_4F  # "SSO"


@dataclass(frozen=True)
class ProviderPerson:
    """Who the provider says signed in: its claims, read by console.accounts.oidc."""

    provider: str
    subject: str
    email: str = ""
    username: str = ""
    name: str = ""
    groups: tuple[str, ...] = ()


def free_username(hint: str) -> str:
    """A username nobody has: the provider's preferred name (or the e-mail's local part),
    with -2, -3… when taken — a local account of the same name is never taken over."""
    base = re.sub(r"[^\w.@+-]", "-", hint).strip("-")[: USERNAME_MAX - 6] or "user"
    users = get_user_model().objects
    candidate, n = base, 1
    while users.filter(username__iexact=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


@service_transaction(durable=True)
def sso_sign_in(*, person: ProviderPerson) -> tuple[object, SyncResult | None, bool]:
    """The account `person` signs in as: (user, what the group sync changed, created). A new
    (provider, subject) gets a new account without a password (audited); a deactivated
    account is returned unchanged and its grants are not synced (the caller refuses it)."""
    known = ExternalIdentity.objects.select_for_update().select_related("user")
    known = known.filter(provider=person.provider, subject=person.subject)
    identity = known.first()
    if identity is None:
        # Accounts are made one at a time (first sign-ins are rare): a second tab's sign-in
        # of the same new person waits, then finds the account the first one made, and two
        # new people never pick the same free username.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ACCOUNT_LOCK])
        # Someone this provider's SCIM client provisioned is linked, not made again.
        identity = known.first() or _scim_link(person)
    created = identity is None
    if created:
        hint = person.username or person.email.partition("@")[0] or person.subject
        user = get_user_model().objects.create_user(
            username=free_username(hint), email=person.email, first_name=person.name[:150]
        )  # no password: this person signs in at their provider
        identity = ExternalIdentity(user=user, provider=person.provider, subject=person.subject)
        audit_record(
            actor=SystemActor(f"sso:{person.provider}"),
            action=AuditAction.SSO_ACCOUNT_CREATE,
            target=user,
            after={
                "username": user.get_username(),
                "email": person.email,
                "provider": person.provider,
                "subject": person.subject,
            },
        )
    user = identity.user
    identity.email = person.email
    identity.groups = sorted(person.groups)
    identity.last_sign_in_at = timezone.now()
    identity.save()
    if not user.is_active:
        return user, None, created
    groups = set(person.groups) | scim_groups_of(user, person.provider)
    return user, groups_sync(user=user, provider=person.provider, groups=groups), created


def scim_groups_of(user, provider: str) -> set[str]:
    """The names `provider`'s SCIM client gave the groups `user` is in: each group's
    displayName and its externalId (Entra's ID tokens carry group object ids, SCIM carries
    both; either may be what a mapping names)."""
    names: set[str] = set()
    for link in ScimUser.objects.filter(user=user, provider=provider).prefetch_related("groups"):
        for group in link.groups.all():
            names.update(n for n in (group.display_name, group.external_id) if n)
    return names


def _scim_link(person: ProviderPerson) -> ExternalIdentity | None:
    """A first sign-in through P of someone P's SCIM client provisioned: the account whose
    SCIM userName is the sign-in's e-mail or preferred username (case-insensitive) is linked
    to the subject — never a local account, never one already linked to another subject."""
    names = {n.strip().lower() for n in (person.email, person.username) if n and n.strip()}
    if not names:
        return None
    link = (
        ScimUser.objects.select_related("user")
        .annotate(lower_name=Lower("user_name"))
        .filter(provider=person.provider, lower_name__in=names)
        .exclude(user__external_identities__provider=person.provider)
        .order_by("pk")
        .first()
    )
    if link is None:
        return None
    audit_record(
        actor=SystemActor(f"sso:{person.provider}"),
        action=AuditAction.SCIM_USER_LINK,
        target=link.user,
        after={
            "username": link.user.get_username(),
            "provider": person.provider,
            "subject": person.subject,
            "scim_user_name": link.user_name,
            "matched": "e-mail"
            if (person.email or "").strip().lower() == link.user_name.lower()
            else "preferred username",
        },
    )
    return ExternalIdentity(user=link.user, provider=person.provider, subject=person.subject)


@service_transaction(durable=True)
def saml_assertion_use(*, provider: str, assertion_id: str, not_on_or_after: datetime) -> bool:
    """Record a SAML assertion as used: False when it already was (a replay, whichever
    process saw it first: the unique assertion id decides). Kept until its NotOnOrAfter plus
    the clock skew allowed — past that it is refused as expired anyway — then forgotten."""
    skew = timedelta(seconds=settings.OIDC_CLOCK_SKEW_SECONDS)
    SamlAssertion.objects.filter(not_on_or_after__lt=timezone.now() - skew).delete()
    try:
        with transaction.atomic():
            SamlAssertion.objects.create(
                provider=provider, assertion_id=assertion_id, not_on_or_after=not_on_or_after
            )
    except IntegrityError:
        return False
    return True

"""Personal API tokens (console.accounts.personal_tokens writes them), the identities
people sign in with at an identity provider (console.accounts.sso_accounts writes them), and
break-glass accounts and recovery codes (console.accounts.second_factors writes them)."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone
from django_otp.models import Device, ThrottlingMixin


class PersonalTokenQuerySet(models.QuerySet):
    def active(self, now=None):
        """Tokens that still authenticate: not revoked and not expired."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=now or timezone.now())


class PersonalToken(models.Model):
    """A person's API token for the operator API (`Authorization: Bearer ccp_…`). Only the
    SHA-256 of the secret is stored; the secret is shown once at creation. What it allows is
    the user's grants intersected with its scope, at every request (console.kernel.policy)."""

    is_personal_token = True

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token.")
    token_hash = models.CharField(max_length=64, unique=True)
    capabilities = ArrayField(
        models.CharField(max_length=50),
        default=list,
        help_text="console.kernel.policy.Capability values",
    )
    # "Every agent" is this flag, never an empty set: a token whose agents are all gone
    # covers no agent, it does not widen to all of them.
    all_agents = models.BooleanField(
        default=False, help_text="Every agent the user's grants cover, now and later."
    )
    agents = models.ManyToManyField(
        "strategies.Agent",
        blank=True,
        related_name="personal_tokens",
        help_text="The agents it covers when not all agents (none: no agent).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = PersonalTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # A name says which script uses the token: unique among a user's unrevoked tokens.
            models.UniqueConstraint(
                fields=["user", "name"],
                condition=Q(revoked_at__isnull=True),
                name="personal_token_unique_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def state(self) -> str:
        """active | expired | revoked"""
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.expires_at > timezone.now() else "expired"


class ExternalIdentity(models.Model):
    """A person as an identity provider knows them: (provider, subject) — OpenID Connect's
    `sub`, never the e-mail, which a provider may let people change — linked to one console
    account, created at their first sign-in (just-in-time)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities"
    )
    provider = models.CharField(max_length=50)
    subject = models.CharField(max_length=255)
    email = models.CharField(max_length=254, blank=True)
    groups = models.JSONField(default=list, blank=True, help_text="As of the last sign-in.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["provider", "subject"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "subject"], name="external_identity_unique_subject"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.subject}"


class BreakGlassAccount(models.Model):
    """A local account an admin marked as break-glass: with single sign-on enforced it still
    signs in with its password, and always with a second factor (never the password alone).
    At most settings.BREAK_GLASS_ACCOUNTS_MAX (console.accounts.second_factors)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="break_glass"
    )
    marked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    marked_at = models.DateTimeField(auto_now_add=True)
    reason = models.TextField()

    class Meta:
        ordering = ["user__username"]

    def __str__(self) -> str:
        return f"break-glass: {self.user}"


class RecoveryCodeDevice(ThrottlingMixin, Device):
    """A person's ten single-use recovery codes, as one django-otp device. Only each code's
    SHA-256 is stored (django-otp's own static device keeps them readable): a code is ~50
    random bits, so a plain hash is as good as a slow one, and a database copy gives nobody
    a way in."""

    class Meta:
        verbose_name = "recovery codes"

    def get_throttle_factor(self) -> int:
        return getattr(settings, "OTP_TOTP_THROTTLE_FACTOR", 1)

    def verify_token(self, token) -> bool:
        allowed, _ = self.verify_is_allowed()
        if not allowed:
            return False
        # The row is deleted in the statement that finds it: used once, even by two at once.
        deleted, _ = self.codes.filter(code_hash=recovery_code_hash(str(token))).delete()
        if deleted:
            self.throttle_reset(commit=True)
        else:
            self.throttle_increment(commit=True)
        return bool(deleted)


class RecoveryCode(models.Model):
    device = models.ForeignKey(RecoveryCodeDevice, on_delete=models.CASCADE, related_name="codes")
    code_hash = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["device", "code_hash"], name="recovery_code_unique"),
        ]

    def __str__(self) -> str:
        return f"recovery code of {self.device.user_id}"


def recovery_code_hash(code: str) -> str:
    """Codes are compared as typed but without spaces, dashes or case."""
    normal = "".join(ch for ch in code.lower() if ch.isalnum())
    return hashlib.sha256(normal.encode()).hexdigest()


class SamlAssertion(models.Model):
    """A SAML assertion the console has accepted, kept until its NotOnOrAfter: the same
    assertion offered again — by anyone, to any process — is a replay and is refused
    (console.accounts.saml). The unique `assertion_id` is the check."""

    provider = models.CharField(max_length=50)
    assertion_id = models.CharField(max_length=255, unique=True)
    not_on_or_after = models.DateTimeField(db_index=True)
    used_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["used_at"]

    def __str__(self) -> str:
        return f"{self.provider}:{self.assertion_id}"


# --- SCIM 2.0 provisioning (issue 33, item 5; console.accounts.scim writes these) -------------
class ScimToken(models.Model):
    """The bearer credential an identity provider's SCIM client sends (`Bearer scim_…`). It
    belongs to ONE provider key: the users and groups it provisions are that provider's, and
    the grants they get are that provider's mappings'. Only the SHA-256 of the secret is kept."""

    provider = models.CharField(max_length=50)
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["provider", "-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "name"],
                condition=Q(revoked_at__isnull=True),
                name="scim_token_unique_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.provider}, {self.prefix}…)"


class ScimUser(models.Model):
    """A person as a provider's SCIM client provisioned them, linked to one console account
    without a password. `attributes` is the SCIM resource as last written (name, emails,
    the enterprise extension…); the columns are what the console searches and decides on.
    Separate from ExternalIdentity: SCIM's id for a person (Okta's user id, Entra's object
    id) is not the `sub` of their ID token, so the two are linked by userName at the first
    sign-in (console.accounts.sso_accounts)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scim_links"
    )
    provider = models.CharField(max_length=50)
    user_name = models.CharField(max_length=255)
    external_id = models.CharField(max_length=255, blank=True)
    active = models.BooleanField(default=True)
    attributes = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider", "user_name"]
        constraints = [
            models.UniqueConstraint(
                Lower("user_name"),
                "provider",
                name="scim_user_unique_user_name",
            ),
            models.UniqueConstraint(
                fields=["provider", "user"], name="scim_user_one_link_per_provider"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.user_name}"


class ScimGroup(models.Model):
    """A group a provider's SCIM client pushed, with its members. Its displayName and its
    externalId are the names a group mapping may use (console.access.group_mappings)."""

    provider = models.CharField(max_length=50)
    display_name = models.CharField(max_length=255)
    external_id = models.CharField(max_length=255, blank=True)
    members = models.ManyToManyField(ScimUser, blank=True, related_name="groups")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider", "display_name"]
        constraints = [
            models.UniqueConstraint(
                Lower("display_name"),
                "provider",
                name="scim_group_unique_display_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.display_name}"

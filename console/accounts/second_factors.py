"""Enforced single sign-on, break-glass accounts and second factors (issue 33 item 4).

Who may sign in with a password (`password_refusal`): nobody is refused while neither
SSO_ENFORCED nor SSO_ENFORCED_DOMAINS is set. With either set, an account linked to a provider
(ExternalIdentity) never is; with SSO_ENFORCED "all", only break-glass accounts are; with
domains, an account whose e-mail is in one of them is refused unless it is break-glass.

The refusal is judged only AFTER the password was found right
(console.accounts.forms.EnforcedSignInMixin):
someone who does not know the password always gets the same "wrong username or password" and
a count towards django-axes' lock, so they learn neither that the username exists nor that it
is held to single sign-on. The person who knows the password is told to use the provider.

Who needs a second factor (`second_factor_required`): every account that enrolled one (a TOTP
app or a security key), and — while single sign-on is enforced — every break-glass account,
which without one is refused (`second_factor_missing`). The password alone never makes a
session for them: the sign-in page keeps the person "pending" in the anonymous session and
`login()` runs only after a right code or key (console.views.second_factor).

Recovery codes are ten single-use codes made when the first factor is enrolled (and again on
request); only their SHA-256 is stored (console.accounts.models.RecoveryCodeDevice).
Wrong codes are throttled per device by django-otp (1, 2, 4, … seconds) and audited.
"""

from __future__ import annotations

import secrets
from base64 import b32encode
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_otp import devices_for_user
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.models import WebAuthnCredential

from console.accounts.models import (
    BreakGlassAccount,
    ExternalIdentity,
    RecoveryCode,
    RecoveryCodeDevice,
    recovery_code_hash,
)
from console.kernel.audit import AccessAction, AuditAction, access_record, audit_record
from console.kernel.errors import Conflict, NotFound, TooManyRequests, ValidationFailed
from console.kernel.policy import Capability, check_user_can
from console.kernel.reasons import reason_clean
from console.kernel.sessions import require_recent_authentication
from console.kernel.transactions import service_transaction
from console.kernel.wording import counted

RECOVERY_CODES = 10
# Advisory lock key of "marking break-glass accounts" (the count limit is judged under it).
_BREAK_GLASS_LOCK = 0x33B6_1A55

KIND_TOTP = "totp"
KIND_WEBAUTHN = "webauthn"
KIND_RECOVERY = "recovery"
KIND_WORDS = {
    KIND_TOTP: "Authenticator app (TOTP)",
    KIND_WEBAUTHN: "Security key or passkey",
    KIND_RECOVERY: "Recovery codes",
}


# --- enforcement -----------------------------------------------------------------------------
def sso_enforced() -> bool:
    """Whether password sign-in is held back for anyone (either setting)."""
    return settings.SSO_ENFORCED == "all" or bool(settings.SSO_ENFORCED_DOMAINS)


def email_domain(email: str) -> str:
    return email.rpartition("@")[2].strip().lower() if "@" in (email or "") else ""


def is_break_glass(user) -> bool:
    return BreakGlassAccount.objects.filter(user_id=user.pk).exists()


def password_refusal(user) -> str:
    """Why this account may not sign in with its password now ("" when it may). Ask only
    once the password was found right (see the module's docstring)."""
    if not sso_enforced():
        return ""
    if ExternalIdentity.objects.filter(user_id=user.pk).exists():
        return "provider_account"
    if is_break_glass(user):
        return ""
    if settings.SSO_ENFORCED == "all":
        return "enforced_for_all"
    if email_domain(user.email) in settings.SSO_ENFORCED_DOMAINS:
        return "enforced_for_domain"
    return ""


def password_refusal_words() -> str:
    return (
        "Single sign-on is enforced for this account: sign in with your organisation's "
        "identity provider (the button below), not with a password."
    )


# --- which factors a person has -------------------------------------------------------------
def device_kind(device) -> str:
    if isinstance(device, TOTPDevice):
        return KIND_TOTP
    if isinstance(device, WebAuthnCredential):
        return KIND_WEBAUTHN
    return KIND_RECOVERY


def second_factors_of(user) -> list:
    """The confirmed factors a person signs in with (recovery codes not counted: they are
    the way back when the others are lost)."""
    return [d for d in devices_for_user(user, confirmed=True) if device_kind(d) != KIND_RECOVERY]


def recovery_device_of(user) -> RecoveryCodeDevice | None:
    return RecoveryCodeDevice.objects.filter(user=user, confirmed=True).first()


def recovery_codes_left(user) -> int:
    return RecoveryCode.objects.filter(device__user=user, device__confirmed=True).count()


def has_second_factor(user) -> bool:
    return bool(second_factors_of(user))


def second_factor_required(user) -> bool:
    """Every account that enrolled a factor; every break-glass account while SSO is enforced."""
    return has_second_factor(user) or (sso_enforced() and is_break_glass(user))


def second_factor_missing_words() -> str:
    return (
        "This break-glass account needs a second factor to sign in while single sign-on is "
        "enforced, and it has none. An operator enrols one on the server: "
        "`manage.py second_factor_enrol <username>`."
    )


@dataclass(frozen=True)
class FactorState:
    """A person's second factors, in words (the account page, the break-glass list)."""

    totp: int
    webauthn: int
    recovery_left: int

    @property
    def words(self) -> str:
        parts = []
        if self.totp:
            parts.append("authenticator app")
        if self.webauthn:
            parts.append(f"{self.webauthn} security key{'s' if self.webauthn > 1 else ''}")
        if not parts:
            return "none"
        return f"{' and '.join(parts)}; {self.recovery_left} recovery codes left"


def factor_state(user) -> FactorState:
    kinds = [device_kind(d) for d in second_factors_of(user)]
    return FactorState(
        totp=kinds.count(KIND_TOTP),
        webauthn=kinds.count(KIND_WEBAUTHN),
        recovery_left=recovery_codes_left(user),
    )


# --- signing in with a second factor --------------------------------------------------------
def _looks_like_totp(code: str) -> bool:
    return code.isdigit() and len(code) == 6


def second_factor_record(user, *, kind: str, path: str, why: str = "") -> None:
    """`auth.second_factor`: allowed (why "") or denied (why `invalid_code`, `throttled`)."""
    access_record(
        actor=user,
        action=AccessAction.AUTH_SECOND_FACTOR,
        target=user,
        outcome="denied" if why else "allowed",
        detail={"kind": kind, "path": path, **({"why": why} if why else {})},
    )


def second_factor_verify(*, user, code: str, path: str):
    """The device a right code belongs to (a TOTP code from an app, or a recovery code, used
    up). A wrong, replayed or throttled code: ValidationFailed / TooManyRequests, each in the
    access log. Six digits are a TOTP code; anything else is taken as a recovery code."""
    code = "".join(code.split())
    if _looks_like_totp(code):
        kind = KIND_TOTP
        devices = list(TOTPDevice.objects.filter(user=user, confirmed=True))
    else:
        kind = KIND_RECOVERY
        devices = list(RecoveryCodeDevice.objects.filter(user=user, confirmed=True))
    for device in devices:
        allowed, data = device.verify_is_allowed()
        if not allowed:
            wait = _throttle_wait_seconds(device)
            second_factor_record(user, kind=kind, path=path, why="throttled")
            raise TooManyRequests(
                f"Too many wrong codes. Wait {counted(wait, 'second')} before the next try.",
                code="second_factor_throttled",
            )
    for device in devices:
        if device.verify_token(code):
            second_factor_record(user, kind=kind, path=path)
            return device
    second_factor_record(user, kind=kind, path=path, why="invalid_code")
    raise ValidationFailed(
        "That code is not right (or was already used). Try the current code from your app, "
        "or one of your recovery codes.",
        code="invalid_code",
    )


def _throttle_wait_seconds(device) -> int:
    failures = device.throttling_failure_count
    if not failures or device.throttling_failure_timestamp is None:
        return 1
    delay = device.get_throttle_factor() * (2 ** (failures - 1))
    passed = (timezone.now() - device.throttling_failure_timestamp).total_seconds()
    return max(1, int(delay - passed + 0.999))


# --- enrolment -------------------------------------------------------------------------------
def totp_pending(user) -> TOTPDevice:
    """The person's unconfirmed authenticator-app device (made when first asked): its secret
    is shown until a code from the app confirms it."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).first()
    if device is None:
        device = TOTPDevice.objects.create(user=user, name="Authenticator app", confirmed=False)
    return device


def totp_uri(device: TOTPDevice) -> str:
    return device.config_url


def totp_secret(device: TOTPDevice) -> str:
    """The key in base32 (what an app asks for when typed in by hand)."""
    return b32encode(device.bin_key).decode()


def _recovery_codes_new(user) -> list[str]:
    """Ten new codes (the old ones stop working); returned once, stored hashed."""
    RecoveryCodeDevice.objects.filter(user=user).delete()
    device = RecoveryCodeDevice.objects.create(user=user, name="Recovery codes", confirmed=True)
    alphabet = "abcdefghjkmnpqrstuvwxyz23456789"
    codes = []
    for _ in range(RECOVERY_CODES):
        raw = "".join(secrets.choice(alphabet) for _ in range(10))
        codes.append(f"{raw[:5]}-{raw[5:]}")
    RecoveryCode.objects.bulk_create(
        [RecoveryCode(device=device, code_hash=recovery_code_hash(c)) for c in codes]
    )
    return codes


def _enrolled(user, device) -> list[str]:
    """After a factor is confirmed: the audit row, and recovery codes if the person had none."""
    codes = [] if recovery_device_of(user) else _recovery_codes_new(user)
    audit_record(
        actor=user,
        action=AuditAction.SECOND_FACTOR_ENROL,
        target=user,
        after={
            "kind": device_kind(device),
            "name": device.name,
            "recovery_codes_made": len(codes),
        },
    )
    return codes


@service_transaction(durable=True)
def totp_confirm(*, user, code: str) -> list[str]:
    """Confirm the pending authenticator app with a code from it. Returns the new recovery
    codes (shown once) when these are the person's first."""
    device = TOTPDevice.objects.select_for_update().filter(user=user, confirmed=False).first()
    if device is None:
        raise NotFound("No authenticator app is waiting to be confirmed. Start again.")
    if not device.verify_token("".join((code or "").split())):
        raise ValidationFailed(
            "That code is not right: type the 6 digits your app shows now.", code="invalid_code"
        )
    TOTPDevice.objects.filter(user=user, confirmed=True).delete()  # one app at a time
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    return _enrolled(user, device)


@service_transaction(durable=True)
def totp_enrol_by_operator(*, user) -> tuple[TOTPDevice, list[str]]:
    """The operator's shell (manage.py second_factor_enrol): a confirmed authenticator app and
    new recovery codes for a local account, printed once. Replaces any app it had."""
    if ExternalIdentity.objects.filter(user=user).exists() or not user.has_usable_password():
        raise Conflict("Only a local account with a password gets a second factor here.")
    TOTPDevice.objects.filter(user=user).delete()
    device = TOTPDevice.objects.create(user=user, name="Authenticator app", confirmed=True)
    _enrolled(user, device)
    codes = _recovery_codes_new(user)
    return device, codes


@service_transaction(durable=True)
def webauthn_enrolled(*, user, device) -> list[str]:
    """A security key registered (django-otp-webauthn wrote it): audited like the others."""
    return _enrolled(user, device)


@service_transaction(durable=True)
def recovery_codes_regenerate(*, user) -> list[str]:
    """Ten new recovery codes (the old ones stop working). Needs a recent sign-in."""
    require_recent_authentication(user, action="make new recovery codes")
    if not has_second_factor(user):
        raise Conflict("Enrol an authenticator app or a security key first.")
    left = recovery_codes_left(user)
    codes = _recovery_codes_new(user)
    audit_record(
        actor=user,
        action=AuditAction.RECOVERY_CODES_REGENERATE,
        target=user,
        before={"codes_left": left},
        after={"codes": len(codes)},
    )
    return codes


@service_transaction(durable=True)
def second_factor_remove(*, user, kind: str, device_id: int) -> None:
    """Remove one of your own factors (needs a recent sign-in). Removing the last one also
    removes the recovery codes. A break-glass account keeps one while SSO is enforced."""
    require_recent_authentication(user, action="remove a second factor")
    model = {KIND_TOTP: TOTPDevice, KIND_WEBAUTHN: WebAuthnCredential}.get(kind)
    device = (
        model.objects.select_for_update().filter(user=user, pk=device_id).first() if model else None
    )
    if device is None:
        raise NotFound("No such second factor.")
    others = [d for d in second_factors_of(user) if (device_kind(d), d.pk) != (kind, device.pk)]
    if not others and sso_enforced() and is_break_glass(user):
        raise Conflict(
            "A break-glass account keeps at least one second factor while single sign-on is "
            "enforced: enrol another first."
        )
    state = {"kind": kind, "name": device.name}
    device.delete()
    if not others:
        RecoveryCodeDevice.objects.filter(user=user).delete()
    audit_record(
        actor=user,
        action=AuditAction.SECOND_FACTOR_REMOVE,
        target=user,
        before=state,
        after={"factors_left": len(others)},
    )


# --- break-glass accounts ------------------------------------------------------------------------
@service_transaction(durable=True)
def break_glass_mark(*, actor, user, reason: str) -> BreakGlassAccount:
    """Mark a local account break-glass. Needs MANAGE_GRANTS on all agents and a recent
    sign-in; at most BREAK_GLASS_ACCOUNTS_MAX (judged under a lock, so two at once cannot
    pass it)."""
    check_user_can(actor, Capability.MANAGE_GRANTS)
    require_recent_authentication(actor, action="mark a break-glass account")
    reason = reason_clean(reason, ask="Give a reason (it is recorded in the audit log).")
    if not user.is_active:
        raise Conflict(f"{user.get_username()} is deactivated.")
    if ExternalIdentity.objects.filter(user=user).exists() or not user.has_usable_password():
        raise Conflict(
            f"{user.get_username()} signs in through an identity provider: only a local "
            "account with a password can be break-glass."
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_BREAK_GLASS_LOCK])
    if BreakGlassAccount.objects.filter(user=user).exists():
        raise Conflict(f"{user.get_username()} is already a break-glass account.")
    limit = settings.BREAK_GLASS_ACCOUNTS_MAX
    if BreakGlassAccount.objects.count() >= limit:
        raise Conflict(
            f"There are already {limit} break-glass accounts (BREAK_GLASS_ACCOUNTS_MAX): "
            "unmark one first."
        )
    account = BreakGlassAccount.objects.create(user=user, marked_by=actor, reason=reason)
    audit_record(
        actor=actor,
        action=AuditAction.BREAK_GLASS_MARK,
        target=user,
        after={"reason": reason, "second_factors": factor_state(user).words},
    )
    return account


@service_transaction(durable=True)
def break_glass_unmark(*, actor, user, reason: str) -> None:
    check_user_can(actor, Capability.MANAGE_GRANTS)
    require_recent_authentication(actor, action="unmark a break-glass account")
    reason = reason_clean(reason, ask="Give a reason (it is recorded in the audit log).")
    account = BreakGlassAccount.objects.select_for_update().filter(user=user).first()
    if account is None:
        raise NotFound(f"{user.get_username()} is not a break-glass account.")
    before = {"marked_at": account.marked_at.isoformat(), "reason": account.reason}
    account.delete()
    audit_record(
        actor=actor,
        action=AuditAction.BREAK_GLASS_UNMARK,
        target=user,
        before=before,
        after={"reason": reason},
    )


def break_glass_rows() -> list[dict]:
    """The Access page's list: each break-glass account, its second factors, last sign-in."""
    accounts = BreakGlassAccount.objects.select_related("user", "marked_by")
    return [
        {
            "account": account,
            "user": account.user,
            "factors": factor_state(account.user),
            "last_login": account.user.last_login,
        }
        for account in accounts
    ]

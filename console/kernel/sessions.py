"""Sessions a bank accepts: an idle timeout, an absolute lifetime, and a recent proof of
identity for the dangerous actions (GitHub's "sudo mode").

A signed-in session carries three clocks (epoch seconds, in the session itself, so a test
moves time by rewriting them and nothing sleeps):

- `SIGNED_IN_AT`: when the person signed in — the absolute lifetime runs from it
  (`SESSION_ABSOLUTE_HOURS`);
- `SEEN_AT`: their last activity — the idle timeout runs from it (`SESSION_IDLE_MINUTES`);
  written at most once a `SEEN_RESOLUTION`, and never by a page's own polling;
- `AUTHENTICATED_AT`: the last time they proved who they are (the sign-in, or a password
  confirmed since) — the dangerous actions need it within `REAUTHENTICATION_MINUTES`.

`authentication_recorded` is the one place a proof is recorded: a password sign-in calls it
(through Django's `user_logged_in`, so every `login()` — the console's page, the break-glass
admin's, a single sign-on's later — starts the clocks), and so does a confirmed password. A
single sign-on satisfies `require_recent_authentication` by sending the person back to the
provider with a forced re-authentication and calling `login()` (or `authentication_recorded`)
when they return; nothing else changes.

Services ask `require_recent_authentication(actor, action=...)` where the dangerous write
happens, so every interface (a page, htmx, the API through a session) is held to it, and the
write never runs without it. Personal API tokens are not sessions: a request made with one
is held to the token's own rules (expiry, revocation, scope), not to these.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from console.kernel.audit import AccessAction, access_record, acting_token
from console.kernel.errors import ReauthenticationRequired

SIGNED_IN_AT = "console_signed_in_at"
SEEN_AT = "console_seen_at"
AUTHENTICATED_AT = "console_authenticated_at"
# Activity is written at most this often (seconds): one session write a minute, not one a
# request; the idle timeout is exact to within it.
SEEN_RESOLUTION = 60
# A request a page makes by itself (htmx polling: a runtimes card, a running rollout) sends
# this header: it is no activity, or an open tab would keep a session alive for ever.
POLL_HEADER = "X-Console-Poll"

# The session of the request being answered (None outside a request: commands, tasks, the
# demo loader — they act with the operator's shell access, as for sensitive sections).
current_session: contextvars.ContextVar = contextvars.ContextVar("console_session", default=None)


def _now() -> float:
    return timezone.now().timestamp()


def idle_seconds() -> int:
    return settings.SESSION_IDLE_MINUTES * 60


def absolute_seconds() -> int:
    return settings.SESSION_ABSOLUTE_HOURS * 3600


def reauthentication_seconds() -> int:
    return settings.REAUTHENTICATION_MINUTES * 60


# --- the clocks ------------------------------------------------------------------------------
def session_started(session) -> None:
    """A sign-in: every clock starts now."""
    now = _now()
    session[SIGNED_IN_AT] = session[SEEN_AT] = session[AUTHENTICATED_AT] = now


def signed_in(sender, request=None, user=None, **kwargs) -> None:
    """Django's `user_logged_in`: a sign-in starts the clocks."""
    if request is not None and hasattr(request, "session"):
        session_started(request.session)


def authentication_recorded(session) -> None:
    """The person proved who they are now (a confirmed password; a provider's
    re-authentication later): the dangerous actions are open for REAUTHENTICATION_MINUTES."""
    session[AUTHENTICATED_AT] = session[SEEN_AT] = _now()


@dataclass(frozen=True)
class Expiry:
    """Why a session ended: "idle" (no activity for `limit` seconds) or "absolute" (signed in
    `limit` seconds ago)."""

    why: str
    limit: int


def session_expiry(session) -> Expiry | None:
    """Whether a signed-in session is over. A session signed in before these clocks existed
    gets them now (its limits run from this request), rather than a surprise sign-out."""
    now = _now()
    if SIGNED_IN_AT not in session:
        session[SIGNED_IN_AT] = session[SEEN_AT] = now
    if now - session[SIGNED_IN_AT] >= absolute_seconds():
        return Expiry("absolute", absolute_seconds())
    if now - session.get(SEEN_AT, now) >= idle_seconds():
        return Expiry("idle", idle_seconds())
    return None


def session_touch(session, *, polled: bool) -> None:
    """Record activity (at most once a SEEN_RESOLUTION; a page's own polling is none)."""
    now = _now()
    if not polled and now - session.get(SEEN_AT, 0) >= SEEN_RESOLUTION:
        session[SEEN_AT] = now


def recently_authenticated(session) -> bool:
    proved = session.get(AUTHENTICATED_AT) if session is not None else None
    return proved is not None and _now() - proved < reauthentication_seconds()


# --- the dangerous actions -----------------------------------------------------------------------
def require_recent_authentication(actor, *, action: str) -> None:
    """The one check of the dangerous actions (approve a release, break-glass, switch a
    sensitive section on, view a snapshot): a person in a session must have signed in or
    confirmed their password within REAUTHENTICATION_MINUTES, else ReauthenticationRequired
    (the page asks for the password and runs the action again; the API answers 401
    `reauthentication_required`). `action` says what, in words: "approve a release".

    Held to it: a request through a session. Not: a personal API token (its own rules), and
    no request at all (commands, tasks: the operator's shell access)."""
    if not getattr(actor, "is_authenticated", False) or acting_token(actor) is not None:
        return  # the system, a runtime token, a personal token: no session to ask
    session = current_session.get()
    if session is None or recently_authenticated(session):
        return
    minutes = settings.REAUTHENTICATION_MINUTES
    raise ReauthenticationRequired(
        f"To {action}, confirm your password: it is asked when you signed in more than "
        f"{minutes} minutes ago.",
        action=action,
        window_minutes=minutes,
    )


# --- the access log ------------------------------------------------------------------------------
def session_expiry_record(user, expiry: Expiry) -> None:
    """`auth.session_expire` for the person whose session the console ended, and why."""
    access_record(
        actor=user,
        action=AccessAction.AUTH_SESSION_EXPIRE,
        target=user,
        outcome="allowed",
        detail={"why": expiry.why, "limit_seconds": expiry.limit},
    )


def reauthentication_record(user, *, path: str, why: str = "") -> None:
    """`auth.reauthenticate`: allowed (why "") or denied (why `invalid_credentials` or
    `locked`), with the address of the action it was for."""
    access_record(
        actor=user,
        action=AccessAction.AUTH_REAUTHENTICATE,
        target=user,
        outcome="denied" if why else "allowed",
        detail={"path": path, **({"why": why} if why else {})},
    )

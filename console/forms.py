"""Forms of the console's own pages: login (throttled), roles, grants, log filters."""

from __future__ import annotations

from datetime import datetime, time, timedelta

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import AnonymousUser, Group
from django.core.cache import cache
from django.utils import timezone

from console.audit import access_record
from console.models import Role
from console.policy import CAPABILITY_LABELS, Capability
from console.request_context import client_ip
from strategies.catalog.models import Agent


# --- login throttling ---------------------------------------------------------------------------
# Failed logins are counted in the cache (Redis) per username and per client IP, over a
# sliding window that restarts at the first failure. Past the limit, the login is refused —
# even with the right password — until the window ends, so guessing cannot continue.
def _throttle_keys(username: str, ip: str | None) -> list[tuple[str, int]]:
    conf = settings.LOGIN_THROTTLE
    keys = [(f"login-fail:user:{username.strip().lower()}", conf["max_failures"])]
    if ip:
        keys.append((f"login-fail:ip:{ip}", conf["max_failures_per_ip"]))
    return keys


def login_locked(username: str, ip: str | None) -> bool:
    return any((cache.get(key) or 0) >= limit for key, limit in _throttle_keys(username, ip))


def login_failure_count(username: str, ip: str | None) -> None:
    window = settings.LOGIN_THROTTLE["window_seconds"]
    for key, _limit in _throttle_keys(username, ip):
        if not cache.add(key, 1, timeout=window):
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, timeout=window)


def login_failures_forget(username: str) -> None:
    cache.delete(_throttle_keys(username, None)[0][0])


class ThrottledLoginMixin:
    """AuthenticationForm with throttling and an access-log row for each failed attempt."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "locked": (
            "Too many failed sign-ins for this account or from this address. "
            "Wait %(minutes)s minutes, or ask an admin to check the access log."
        ),
    }

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        ip = client_ip(self.request) if self.request else None
        if username and login_locked(username, ip):
            access_record(
                actor=AnonymousUser(),
                action="auth.login",
                target=("auth.user", username, username),
                outcome="denied",
                detail={"why": "locked"},
            )
            raise forms.ValidationError(
                self.error_messages["locked"],
                code="locked",
                params={"minutes": settings.LOGIN_THROTTLE["window_seconds"] // 60},
            )
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            if username:
                login_failure_count(username, ip)
                access_record(
                    actor=AnonymousUser(),
                    action="auth.login",
                    target=("auth.user", username, username),
                    outcome="denied",
                    detail={"why": "invalid_credentials"},
                )
            raise
        login_failures_forget(username)
        return cleaned


class LoginForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class AdminLoginForm(ThrottledLoginMixin, AdminAuthenticationForm):
    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "locked": ThrottledLoginMixin.error_messages["locked"],
    }


# --- roles and grants ---------------------------------------------------------------------------
CAPABILITY_CHOICES = [(c.value, CAPABILITY_LABELS[c]) for c in Capability]


class RoleForm(forms.Form):
    name = forms.CharField(max_length=100)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    capabilities = forms.MultipleChoiceField(
        choices=CAPABILITY_CHOICES,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="A new role starts with none: it can do nothing until you tick something.",
    )


ALL_AGENTS = "*"


class GrantForm(forms.Form):
    """Who gets which role where. Validation accepts any existing agent: the service then
    refuses (404, logged) an agent outside the actor's scope, so a forged form is caught."""

    username = forms.CharField(required=False, label="User", max_length=150)
    group = forms.ModelChoiceField(queryset=Group.objects.order_by("name"), required=False)
    role = forms.ModelChoiceField(queryset=None)
    agent = forms.CharField(label="Agent")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), min_length=3)

    def __init__(self, *args, agent_choices: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].queryset = Role.objects.order_by("name")
        self.fields["agent"].widget = forms.Select(choices=agent_choices)

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        if not username:
            return None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise forms.ValidationError(f"No user named {username!r}.")
        return user

    def clean_agent(self):
        key = self.cleaned_data["agent"]
        if key == ALL_AGENTS:
            return None
        agent = Agent.objects.filter(key=key).first()
        if agent is None:
            raise forms.ValidationError("Choose an agent.")
        return agent

    def clean(self):
        cleaned = super().clean()
        if bool(cleaned.get("username")) == bool(cleaned.get("group")):
            raise forms.ValidationError("Give the role to either a user or a group (one of them).")
        return cleaned


# --- log filters --------------------------------------------------------------------------------
class LogFilterForm(forms.Form):
    """Filters of the audit log and the access log; they live in the URL (GET)."""

    agent = forms.CharField(required=False)
    actor = forms.CharField(required=False, max_length=200)
    action = forms.CharField(required=False, max_length=100)
    target = forms.CharField(required=False, max_length=300)
    outcome = forms.ChoiceField(
        required=False,
        choices=[("", "Any outcome"), ("allowed", "Allowed"), ("denied", "Denied")],
    )
    since = forms.DateField(required=False, label="From")
    until = forms.DateField(required=False, label="To (inclusive)")

    def filters(self) -> dict:
        """Keyword arguments for console.audit.logs_filter (empty when the form is invalid)."""
        if not self.is_valid():
            return {}
        data = self.cleaned_data
        tz = timezone.get_current_timezone()
        since = data["since"] and timezone.make_aware(datetime.combine(data["since"], time.min), tz)
        until = data["until"] and timezone.make_aware(
            datetime.combine(data["until"], time.min), tz
        ) + timedelta(days=1)
        return {
            "agent": data["agent"],
            "actor": data["actor"],
            "action": data["action"],
            "target": data["target"],
            "outcome": data["outcome"],
            "since": since,
            "until": until,
        }

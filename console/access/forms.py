"""Forms of the console's own pages: sign-in (locked out by django-axes), roles, grants,
log filters."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import AnonymousUser, Group
from django.utils import timezone

from console.access.selectors import login_lock_rule
from console.kernel.audit import AccessAction, AuditAction, access_record, action_filter_choices
from console.kernel.models import Role
from console.kernel.policy import CAPABILITY_LABELS, Capability
from console.kernel.sessions import reauthentication_record
from strategies.catalog.models import Agent


# --- sign-in -------------------------------------------------------------------------------
# Lockout is django-axes' (settings AXES_FAILURE_LIMIT, AXES_COOLOFF_TIME): that many failures
# for one username from one address lock that pair. The forms below write the access-log row
# of each attempt.
def lockout_message() -> str:
    minutes = login_lock_rule().cool_off_minutes
    return (
        "Too many failed sign-ins for this account from this address. "
        f"Wait {minutes} minutes, or ask an admin to unlock it."
    )


class SignInMixin:
    """AuthenticationForm that asks django-axes' backend whether the username may sign in
    from this address, and writes an access-log row for each failed or refused attempt
    (`auth.login` / `denied`, why: `invalid_credentials` or `locked`)."""

    def clean(self):
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is None or not password:
            return self.cleaned_data
        try:
            self._authenticate(username, password)
        except forms.ValidationError as error:
            access_record(
                actor=AnonymousUser(),
                action=AccessAction.AUTH_LOGIN,
                target=("auth.user", username, username),
                outcome="denied",
                detail={"why": "locked" if error.code == "locked" else "invalid_credentials"},
            )
            raise
        return self.cleaned_data

    def _authenticate(self, username: str, password: str) -> None:
        # AuthenticationForm.clean, plus axes' "why": its backend fills `response_context`
        # when it refuses a locked pair (before any password is checked).
        refusal: dict = {}
        self.user_cache = authenticate(
            self.request, username=username, password=password, response_context=refusal
        )
        if self.user_cache is None:
            if refusal:
                raise forms.ValidationError(lockout_message(), code="locked")
            raise self.get_invalid_login_error()
        self.confirm_login_allowed(self.user_cache)


class LoginForm(SignInMixin, AuthenticationForm):
    pass


# The password field of the confirm-your-password page (console.views.reauthentication_page):
# a form posted with it runs the action it was for once the password is right.
REAUTH_FIELD = "reauth_password"


class ReauthenticationForm(forms.Form):
    """The signed-in person's password, before a dangerous action (console.kernel.sessions).
    Checked as a sign-in is: django-axes refuses a locked username and address and counts a
    wrong password towards the lock, so a stolen session cannot guess at leisure. Each
    attempt is in the access log (`auth.reauthenticate`)."""

    reauth_password = forms.CharField(
        label="Your password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password", "autofocus": True}),
    )

    def __init__(self, request, *args, **kwargs):
        self.request = request
        super().__init__(*args, **kwargs)

    def clean(self):
        password = self.cleaned_data.get(REAUTH_FIELD)
        if not password:
            return self.cleaned_data
        user = self.request.user
        refusal: dict = {}
        proved = authenticate(
            self.request,
            username=user.get_username(),
            password=password,
            response_context=refusal,
        )
        path = self.request.path
        if proved is None or proved.pk != user.pk:
            why = "locked" if refusal else "invalid_credentials"
            reauthentication_record(user, path=path, why=why)
            if refusal:
                raise forms.ValidationError(lockout_message(), code="locked")
            raise forms.ValidationError(
                "That is not your password. Nothing was done.", code="invalid_credentials"
            )
        reauthentication_record(user, path=path)
        return self.cleaned_data


class AdminLoginForm(SignInMixin, AdminAuthenticationForm):
    pass


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
    refuses (404, logged) an agent outside the actor's scope, so a forged form is caught.
    `roles` are the roles offered: those the actor may grant somewhere (policy)."""

    # Picked from the list of users on the page (a username); a group is the alternative.
    username = forms.CharField(required=False, label="User", max_length=150)
    group = forms.ModelChoiceField(
        queryset=Group.objects.order_by("name"),
        required=False,
        empty_label="No group: give it to the user above",
    )
    role = forms.ModelChoiceField(queryset=None, empty_label="Choose a role…")
    agent = forms.CharField(label="Agent")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), min_length=3)

    def __init__(self, *args, agent_choices: list[tuple[str, str]], roles: list[Role], **kwargs):
        super().__init__(*args, **kwargs)
        role = self.fields["role"]
        role.queryset = Role.objects.filter(pk__in=[r.pk for r in roles]).order_by("name")
        role.label_from_instance = lambda r: (
            f"{r.name} — {r.description}" if r.description else r.name
        )
        role.widget.attrs.update({"required": True, "aria-required": "true"})
        self.fields["agent"].widget = forms.Select(
            choices=agent_choices, attrs={"required": True, "aria-required": "true"}
        )
        self.fields["reason"].widget.attrs.update({"required": True, "aria-required": "true"})

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


class GroupMappingForm(forms.Form):
    """A provider's group → a role, on all agents or on the agents ticked. The service judges
    the escalation rule (the mapper holds every capability of the role where it applies)."""

    provider = forms.ChoiceField(label="Identity provider")
    group = forms.CharField(
        max_length=200, help_text="The group's name exactly as the provider sends it."
    )
    role = forms.ModelChoiceField(
        queryset=Role.objects.order_by("name"), empty_label="Choose a role…"
    )
    all_agents = forms.BooleanField(
        required=False, label="All agents (also agents added later)", initial=False
    )
    agents = forms.ModelMultipleChoiceField(
        queryset=Agent.objects.filter(archived_at__isnull=True).order_by("key"),
        required=False,
        to_field_name="key",
        widget=forms.CheckboxSelectMultiple,
        help_text="Or tick the agents it applies to.",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), min_length=3)

    def __init__(self, *args, providers: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["provider"].choices = providers
        self.fields["agents"].label_from_instance = lambda a: a.key


# --- log filters --------------------------------------------------------------------------------
class LogFilterForm(forms.Form):
    """Filters of the audit log and the access log; they live in the URL (GET). `actions` is
    the log's list of actions (AuditAction or AccessAction): the action filter offers those
    and refuses anything else."""

    agent = forms.CharField(required=False)
    actor = forms.CharField(required=False, max_length=200)
    action = forms.ChoiceField(
        required=False,
        error_messages={
            "invalid_choice": "No action of this log is called “%(value)s”: pick one from the list."
        },
    )
    target = forms.CharField(required=False, max_length=300)
    token = forms.CharField(required=False, max_length=200, label="Token")
    outcome = forms.ChoiceField(
        required=False,
        choices=[("", "Any outcome"), ("allowed", "Allowed"), ("denied", "Denied")],
    )
    since = forms.DateField(required=False, label="From")
    until = forms.DateField(required=False, label="To (inclusive)")

    def __init__(self, *args, actions: type[AuditAction | AccessAction], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = [("", "Any action"), *action_filter_choices(actions)]
        self.fields["action"].widget.attrs.update({"id": "f-action", "class": "input"})

    def filters(self) -> dict:
        """Keyword arguments for console.kernel.audit.logs_filter (empty when the form is invalid)."""
        if not self.is_valid():
            return {}
        data = self.cleaned_data
        tz = timezone.get_current_timezone()

        def start_of(day):
            return timezone.make_aware(datetime.combine(day, time.min), tz)

        since = data["since"] and start_of(data["since"])
        # "To" includes its day: before the start of the next one (the last day has none).
        until = data["until"] and (
            None if data["until"] == date.max else start_of(data["until"] + timedelta(days=1))
        )
        return {
            "agent": data["agent"],
            "actor": data["actor"],
            "action": data["action"],
            "target": data["target"],
            "token": data["token"],
            "outcome": data["outcome"],
            "since": since,
            "until": until,
        }

"""Forms of the account page (a new personal API token) and the sign-in forms with enforced
single sign-on and second factors (console.access.forms' sign-in, plus
console.accounts.second_factors' rules)."""

from __future__ import annotations

from django import forms
from django.contrib.auth.models import AnonymousUser

from console.access import forms as access_forms
from console.accounts.personal_tokens import (
    DEFAULT_DAYS,
    EXPIRY_CHOICES,
    NAME_MAX,
    capabilities_offered,
)
from console.accounts.second_factor_views import reauth_key_proved
from console.accounts.second_factors import (
    has_second_factor,
    password_refusal,
    password_refusal_words,
    second_factor_missing_words,
    second_factor_required,
    second_factor_verify,
)
from console.kernel.audit import AccessAction, access_record
from console.kernel.errors import ApplicationError
from console.kernel.policy import CAPABILITY_LABELS, Capability, agents_visible_to
from console.kernel.sessions import reauthentication_record


class PersonalTokenForm(forms.Form):
    """A new personal API token: only the capabilities the user holds somewhere and the
    agents they see are offered (anything else is refused as an invalid choice)."""

    name = forms.CharField(max_length=NAME_MAX, help_text="Which script or machine uses it.")
    expires_in_days = forms.TypedChoiceField(
        coerce=int,
        choices=[(d, f"{d} days") for d in EXPIRY_CHOICES],
        initial=DEFAULT_DAYS,
        label="Expires after",
    )
    capabilities = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    agents = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every agent your grants cover, now and later.",
    )

    def clean(self):
        cleaned = super().clean()
        # The form's "none ticked" is every agent; the service is told so explicitly.
        cleaned["all_agents"] = not cleaned.get("agents")
        return cleaned

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        offered = capabilities_offered(user)
        self.fields["capabilities"].choices = [(c.value, CAPABILITY_LABELS[c]) for c in offered]
        self.fields["capabilities"].initial = [
            c.value for c in offered if c == Capability.VIEW_CONFIG
        ]
        self.fields["agents"].choices = [
            (key, key)
            for key in agents_visible_to(user).order_by("key").values_list("key", flat=True)
        ]


# --- sign-in with enforced single sign-on and second factors -------------------------------------
REAUTH_FIELD = access_forms.REAUTH_FIELD
# Beside the password, for an account with a second factor: a code from the app, or a recovery code.
REAUTH_CODE_FIELD = "reauth_code"


class EnforcedSignInMixin:
    """After console.access.forms.SignInMixin found the password right: refuse the accounts
    held to single sign-on (`sso_enforced`), break-glass accounts without a second factor
    (`second_factor_missing`), and — on a page that cannot ask for one (the Django admin's,
    `asks_second_factor` False) — every account that needs one (`second_factor_elsewhere`).
    Judged after the password, so only someone who knows it learns any of this."""

    asks_second_factor = True

    def clean(self):
        cleaned = super().clean()
        user = getattr(self, "user_cache", None)
        if user is not None:
            self._check_password_sign_in(user, cleaned.get("username") or "")
        return cleaned

    def _check_password_sign_in(self, user, username: str) -> None:
        why, words = "", ""
        if rule := password_refusal(user):
            why, words = "sso_enforced", password_refusal_words()
        elif second_factor_required(user) and not has_second_factor(user):
            why, words = "second_factor_missing", second_factor_missing_words()
        elif second_factor_required(user) and not self.asks_second_factor:
            why = "second_factor_elsewhere"
            words = "This account signs in with a second factor: use the console's sign-in page."
        if not why:
            return
        access_record(
            actor=AnonymousUser(),
            action=AccessAction.AUTH_LOGIN,
            target=("auth.user", user.pk, username),
            outcome="denied",
            detail={"why": why, **({"rule": rule} if rule else {})},
        )
        self.user_cache = None
        raise forms.ValidationError(words, code=why)


class LoginForm(EnforcedSignInMixin, access_forms.LoginForm):
    pass


class AdminLoginForm(EnforcedSignInMixin, access_forms.AdminLoginForm):
    asks_second_factor = False


class ReauthenticationForm(access_forms.ReauthenticationForm):
    """Confirm your password — and, with a second factor, a code (`auth.second_factor`,
    throttled as at sign-in) or a security key used on the page just before."""

    reauth_code = forms.CharField(
        label="Code from your authenticator app, or a recovery code",
        required=False,
        max_length=32,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code"}),
    )

    def __init__(self, request, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        user = request.user
        self.asks_code = user.is_authenticated and has_second_factor(user)
        if not self.asks_code:
            del self.fields[REAUTH_CODE_FIELD]

    def confirm_more(self, user, path: str) -> None:
        if not self.asks_code:
            return
        code = self.cleaned_data.get(REAUTH_CODE_FIELD) or ""
        if not code.strip() and reauth_key_proved(self.request):
            return  # a security key, used on this page just now (in the access log already)
        if not code.strip():
            reauthentication_record(user, path=path, why="second_factor_missing")
            raise forms.ValidationError(
                "Your account has a second factor: type a code from your app as well. "
                "Nothing was done.",
                code="second_factor_missing",
            )
        try:
            second_factor_verify(user=user, code=code, path=path)
        except ApplicationError as error:
            reauthentication_record(user, path=path, why=error.code)
            raise forms.ValidationError(
                f"{error.message} Nothing was done.", code=error.code
            ) from None


class ScimTokenForm(forms.Form):
    """A SCIM token for one identity provider (console.accounts.scim judges who may)."""

    provider = forms.CharField(
        max_length=50,
        label="Identity provider",
        help_text="Its key, as in OIDC_PROVIDERS (or the SAML provider's key).",
    )
    name = forms.CharField(
        max_length=100, help_text="Which SCIM client uses it, e.g. “Okta production”."
    )

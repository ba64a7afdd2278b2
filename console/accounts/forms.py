"""Forms of the account page: a new personal API token."""

from __future__ import annotations

from django import forms

from console.accounts.personal_tokens import (
    DEFAULT_DAYS,
    EXPIRY_CHOICES,
    NAME_MAX,
    capabilities_offered,
)
from console.kernel.policy import CAPABILITY_LABELS, Capability, agents_visible_to


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

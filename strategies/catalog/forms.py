"""Forms of the Agents & environments pages. They read what the person typed; the rules
(key syntax, ranges, snapshot ≤ trace retention) are the services', whose refusals come back
at the field they name (`show_refusal`)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils.functional import lazy

from console.kernel.errors import ApplicationError
from console.kernel.reasons import MAX_REASON_CHARS
from strategies.catalog.models import SNAPSHOT_RETENTION_DAYS_DEFAULT, TRACE_RETENTION_DAYS_DEFAULT
from strategies.catalog.services import MAX_POSITION, MAX_RETENTION_DAYS

KEY_HELP = (
    "Lowercase letters, digits, '-' and '_', e.g. {example}. It is what runtimes and tokens "
    "send, so it cannot change later."
)


class _Edit(forms.Form):
    # The state the form was opened with (services.state_digest): a change someone made
    # meanwhile is refused instead of overwritten.
    loaded = forms.CharField(required=False, widget=forms.HiddenInput)


class AgentForm(_Edit):
    key = forms.CharField(
        max_length=100,
        help_text=KEY_HELP.format(example="assistant_returns"),
        widget=forms.TextInput(attrs={"autocapitalize": "off", "spellcheck": "false"}),
    )
    name = forms.CharField(max_length=200, required=False, help_text="Shown next to the key.")
    description = forms.CharField(
        max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 3})
    )

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if editing:
            del self.fields["key"]
        else:
            del self.fields["loaded"]


class EnvironmentForm(_Edit):
    key = forms.CharField(
        max_length=100,
        help_text=KEY_HELP.format(example="bank-uat"),
        widget=forms.TextInput(attrs={"autocapitalize": "off", "spellcheck": "false"}),
    )
    name = forms.CharField(max_length=200, required=False)
    position = forms.IntegerField(
        min_value=0,
        max_value=MAX_POSITION,
        required=False,
        help_text="Promotion order: lower first (sg-test 10, bank-uat 20, prod 30). Empty: last.",
    )
    protected = forms.BooleanField(
        required=False, help_text="Publishing here needs a second person's approval."
    )
    rollback_needs_approval = forms.BooleanField(
        required=False,
        label="Rollbacks need approval",
        help_text="Off by default: a rollback is the emergency action and must be fast. On: a "
        "rollback here becomes a request for a second person, like a protected publish.",
    )
    require_preview = forms.BooleanField(
        required=False,
        label="Publishing needs an impact preview",
        help_text="A strategy goes live here only after a complete impact preview of the same "
        "content, at most 24 hours old, over 1,000 traces or the whole last week (fewer: "
        "allowed with a reason).",
    )
    break_glass_reason = forms.CharField(
        max_length=MAX_REASON_CHARS,
        required=False,
        label="Break-glass reason",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Needed only to switch an approval off, which no second person checks: the "
        "change is flagged as break-glass in the audit log, the environment shows a banner "
        "until the approval is on again, and every version that goes live here meanwhile is "
        "marked unreviewed and is never offered as a rollback target.",
    )
    trace_retention_days = forms.IntegerField(
        min_value=1,
        max_value=MAX_RETENTION_DAYS,
        initial=TRACE_RETENTION_DAYS_DEFAULT,
        # Lazy: the cadence is read when the form is shown (settings.TRACES_PURGE_MINUTES).
        help_text=lazy(
            lambda: (
                "Traces are deleted with their day (UTC), once all of it is older than this. "
                "A change applies at the next purge "
                f"(every {settings.TRACES_PURGE_MINUTES} minutes)."
            ),
            str,
        )(),
    )
    snapshot_retention_days = forms.IntegerField(
        min_value=1,
        max_value=MAX_RETENTION_DAYS,
        initial=SNAPSHOT_RETENTION_DAYS_DEFAULT,
        help_text="Full requests (sensitive) are deleted sooner; at most the trace retention.",
    )

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if not editing:
            del self.fields["loaded"]
            del self.fields["break_glass_reason"]  # creating relaxes nothing
        else:
            del self.fields["key"]
            self.fields["position"].required = True
            self.fields["position"].help_text = "Promotion order: lower first."


def show_refusal(form: forms.Form, error: ApplicationError) -> None:
    """A service's refusal at the field it names (or above the form)."""
    if error.code in ("agent_exists", "environment_exists") and "key" in form.fields:
        form.add_error("key", error.message + " Choose another key.")
        return
    placed = False
    if error.code == "break_glass_required" and "break_glass_reason" in form.fields:
        form.add_error("break_glass_reason", error.message)
        placed = True
    for detail in error.details:
        field = detail.get("path")
        if field in form.fields:
            form.add_error(field, detail.get("message") or error.message)
            placed = True
    if not placed:
        form.add_error(None, error.message)

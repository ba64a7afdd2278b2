"""An environment's external change system (docs/change-approvals.md): the admin's settings
page — switch change records on, where requests go, the status URL, the validity window —
with the secret shown once, and the environment's recent change records."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods

from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, Everywhere, requires
from strategies.catalog.selectors import environment_get
from strategies.releases.selectors.changes import change_records_for, change_system_of
from strategies.releases.services.change_records import change_record_words
from strategies.releases.services.changes import change_system_configure


class ChangeSystemForm(forms.Form):
    requires_change_record = forms.BooleanField(
        required=False,
        label="Require an approved change record to go live here",
        help_text="Publishes, approvals and rollout starts wait for the change system; "
        "rollbacks never do.",
    )
    url = forms.CharField(
        max_length=500,
        label="Change system URL",
        help_text="Where the console POSTs its signed change requests.",
    )
    status_url_template = forms.CharField(
        max_length=500,
        required=False,
        label="Status URL (optional, for polling)",
        help_text="{id} and {change_number} are filled in; leave empty if the system calls back.",
    )
    validity_hours = forms.IntegerField(
        min_value=1,
        max_value=24 * 90,
        initial=72,
        label="Approval stays usable (hours)",
    )
    rotate_secret = forms.BooleanField(
        required=False, label="Make a new signing secret (the old one stops working)"
    )


def _refusal_at_fields(form: forms.Form, error: ApplicationError) -> None:
    """The service's whole sentence (what to do, not just what failed) at each field it
    names, or above the form."""
    fields = {d.get("path") for d in error.details} & set(form.fields)
    for field in sorted(fields):
        form.add_error(field, error.message)
    if not fields:
        form.add_error(None, error.message)


@requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)
@require_http_methods(["GET", "POST"])
def change_system(request, environment):
    env = environment_get(key=environment)
    system = change_system_of(env)
    initial = (
        {
            "requires_change_record": system.requires_change_record,
            "url": system.url,
            "status_url_template": system.status_url_template,
            "validity_hours": system.validity_hours,
        }
        if system
        else {"validity_hours": 72}
    )
    form = ChangeSystemForm(request.POST or None, initial=initial)
    secret = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                system, secret = change_system_configure(
                    environment=env, actor=request.user, **form.cleaned_data
                )
            except ApplicationError as error:
                if error.status in (403, 404):
                    raise
                _refusal_at_fields(form, error)
                status = error.status
            else:
                if secret is None:
                    messages.success(request, f"The change system of {env.key} is saved.")
                    return redirect("change-system", environment=env.key)
        else:
            status = 400
    records = [
        (record, change_record_words(record))
        for record in change_records_for(environment=env, limit=20)
    ]
    return TemplateResponse(
        request,
        "releases/change_system.html",
        {"environment": env, "form": form, "system": system, "secret": secret, "records": records},
        status=status,
    )

"""Access → SIEM streaming: the destinations the audit and access logs stream to, their
status and backlog, and a form to add one (console.access.siem; docs/siem.md)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods, require_POST

from console.access import siem
from console.kernel.errors import ApplicationError, NotFound
from console.kernel.models import SiemDestination
from console.kernel.policy import Capability, Everywhere, requires

SIEM_ADMINS = requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)


class SiemDestinationForm(forms.Form):
    name = forms.CharField(max_length=siem.NAME_MAX, help_text="How the page names it.")
    protocol = forms.ChoiceField(choices=SiemDestination.Protocol.choices)
    url = forms.CharField(
        label="Address",
        max_length=500,
        help_text="Syslog: tcp+tls://host:port (or tcp:// without TLS). Splunk: the "
        "collector's URL, e.g. https://splunk.example.com:8088/services/collector/event. "
        "OpenTelemetry: the logs URL, e.g. https://otel.example.com:4318/v1/logs.",
    )
    token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Splunk: the HEC token (required). OpenTelemetry: a bearer token (optional). "
        "Stored encrypted; it is never shown again.",
    )
    ca_certificate = forms.CharField(
        label="CA certificate (PEM)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="TLS syslog only: the CA the receiver's certificate must chain to (default: "
        "the system's trust store).",
    )


def _rows():
    rows = list(SiemDestination.objects.prefetch_related("cursors"))
    for row in rows:
        row.backlog = siem.backlog(row)
        row.behind = sum(b.behind for b in row.backlog)
        ages = [b.age_seconds for b in row.backlog if b.age_seconds is not None]
        row.oldest_age = max(ages) if ages else None
        row.dialog_id = f"remove-destination-{row.pk}"
        row.remove_lines = [
            f"Nothing more is sent to {row.name}; what it has not accepted yet "
            f"({row.behind} row{'s' if row.behind != 1 else ''}) is not sent.",
            "The audit and access logs themselves stay as they are.",
        ]
    return rows


def _form_error(form, error: ApplicationError) -> None:
    """The service's refusal, in its words, at the field it names (else above the form)."""
    paths = [d.get("path") for d in error.details or [] if d.get("path") in form.fields]
    form.add_error(paths[0] if paths else None, error.message)


@require_http_methods(["GET", "POST"])
@SIEM_ADMINS
def siem_destination_list(request):
    """The destinations (status, backlog per chain) and a form to add one."""
    siem.check_may_manage(request.user)
    form = SiemDestinationForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                destination = siem.destination_create(actor=request.user, **form.cleaned_data)
            except ApplicationError as error:
                if error.status in (403, 404):
                    raise
                _form_error(form, error)
                status = error.status
            else:
                messages.success(
                    request,
                    f"Added {destination.name}: the audit and access logs stream to it from "
                    "their start.",
                )
                return redirect("siem-destination-list")
        else:
            status = 400
    context = {"form": form, "destinations": _rows()}
    return TemplateResponse(request, "access/siem_destination_list.html", context, status=status)


def _destination(pk: int) -> SiemDestination:
    destination = SiemDestination.objects.filter(pk=pk).first()
    if destination is None:
        raise NotFound("No such SIEM destination.")
    return destination


def _act(request, pk: int, act, done: str):
    destination = _destination(pk)
    try:
        act(destination)
    except ApplicationError as error:
        if error.status in (403, 404):
            raise
        messages.error(request, error.message)
    else:
        messages.success(request, done.format(name=destination.name))
    return redirect("siem-destination-list")


class SiemDestinationChangeForm(forms.Form):
    """A destination's address, token and CA: a blank token keeps the one stored."""

    url = forms.CharField(label="Address", max_length=500)
    token = forms.CharField(
        label="New token",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave blank to keep the stored one.",
    )
    ca_certificate = forms.CharField(
        label="CA certificate (PEM)", required=False, widget=forms.Textarea(attrs={"rows": 3})
    )


@require_POST
@SIEM_ADMINS
def siem_destination_change(request, pk: int):
    """Change the address, the token (blank: kept) or the CA; the cursors stay."""
    destination = _destination(pk)
    form = SiemDestinationChangeForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give the destination's address.")
        return redirect("siem-destination-list")
    data = dict(form.cleaned_data)
    if not data["token"]:
        del data["token"]
    return _act(
        request,
        pk,
        lambda d: siem.destination_update(actor=request.user, destination=d, **data),
        f"Changed {destination.name}. A paused destination stays paused until you resume it.",
    )


@require_POST
@SIEM_ADMINS
def siem_destination_pause(request, pk: int):
    return _act(
        request,
        pk,
        lambda d: siem.destination_pause(
            actor=request.user, destination=d, reason=request.POST.get("reason", "")
        ),
        "Paused {name}: its backlog grows until you resume it.",
    )


@require_POST
@SIEM_ADMINS
def siem_destination_resume(request, pk: int):
    return _act(
        request,
        pk,
        lambda d: siem.destination_resume(actor=request.user, destination=d),
        "Resumed {name}: its backlog is sent first.",
    )


@require_POST
@SIEM_ADMINS
def siem_destination_delete(request, pk: int):
    return _act(
        request,
        pk,
        lambda d: siem.destination_delete(
            actor=request.user, destination=d, reason=request.POST.get("reason", "")
        ),
        "Removed {name}.",
    )

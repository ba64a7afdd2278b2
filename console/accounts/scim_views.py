"""Access → Provisioning (SCIM): the SCIM tokens (a new one's secret shown once, on that
answer only; revoke), and the people and groups each provider's SCIM client provisioned.
Thin: console.accounts.scim judges who may, writes and audits."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods, require_POST

from console.accounts import scim
from console.accounts.forms import ScimTokenForm
from console.accounts.models import ScimToken
from console.kernel.credentials import shows_secret
from console.kernel.errors import ApplicationError, NotFound
from console.kernel.policy import Capability, Everywhere, requires
from console.kernel.sso_providers import sso_buttons


def _form_error(form, error: ApplicationError) -> None:
    for detail in error.details or [{}]:
        field = detail.get("path") if detail.get("path") in form.fields else None
        form.add_error(field, detail.get("message") or error.message)


@shows_secret
@require_http_methods(["GET", "POST"])
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def scim_provisioning(request):
    form = ScimTokenForm(request.POST or None)
    created, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            try:
                created = scim.scim_token_create(actor=request.user, **form.cleaned_data)
            except ApplicationError as error:
                if error.status == 404:
                    raise
                _form_error(form, error)
                status = error.status
            else:
                form = ScimTokenForm()
        else:
            status = 400
    overview = scim.scim_overview()
    for token in overview["tokens"]:
        token.dialog_id = f"revoke-scim-token-{token.pk}"
        token.revoke_lines = [
            f"{token.provider}'s SCIM client using “{token.name}” gets 401 from its next call.",
            "People and groups it provisioned stay as they are.",
        ]
    context = {
        **overview,
        "form": form,
        "created": created,
        "base_url": request.build_absolute_uri("/scim/v2/"),
        "provider_names": {p.key: p.name for p in sso_buttons()},
    }
    return TemplateResponse(request, "access/scim_provisioning.html", context, status=status)


@require_POST
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def scim_token_revoke(request, pk: int):
    token = ScimToken.objects.filter(pk=pk).first()
    if token is None:
        raise NotFound("No such SCIM token.")
    try:
        scim.scim_token_revoke(actor=request.user, token=token)
    except ApplicationError as error:
        if error.status == 404:
            raise
        messages.error(request, error.message)
    else:
        messages.success(request, f"Revoked: {token.name} ({token.provider}).")
    return redirect("scim-provisioning")

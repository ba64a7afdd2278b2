"""The signed-in person's own page: their personal API tokens (create, shown once; list;
revoke). Thin: the form parses, console.accounts.personal_tokens writes and audits."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.accounts.forms import PersonalTokenForm
from console.accounts.models import PersonalToken
from console.accounts.personal_tokens import (
    MAX_DAYS,
    personal_token_create,
    personal_token_revoke,
    personal_tokens_all,
    personal_tokens_of,
)
from console.accounts.second_factor_views import account_second_factor_context
from console.kernel.credentials import shows_secret
from console.kernel.errors import ApplicationError, NotFound
from console.kernel.policy import CAPABILITY_LABELS, Capability, Everywhere, requires


def revoke_lines(token: PersonalToken) -> list[str]:
    """What revoking a token changes, in words, for the confirm dialog."""
    return [
        f"“{token.name}” ({token.prefix}…) of {token.user.get_username()} stops working at "
        "once: the next request with it gets 401.",
        "Scripts using it need a new token.",
    ]


def token_rows(tokens) -> list[PersonalToken]:
    """Tokens ready to list: labels of their capabilities and their revoke dialog."""
    rows = list(tokens)
    for token in rows:
        token.capability_labels = [CAPABILITY_LABELS.get(c, c) for c in token.capabilities]
        token.dialog_id = f"revoke-token-{token.pk}"
        token.revoke_lines = revoke_lines(token)
    return rows


@shows_secret
@require_http_methods(["GET", "POST"])
def account(request):
    """The user's account: their personal API tokens. A new token's secret is shown in this
    response only."""
    form = PersonalTokenForm(request.POST or None, user=request.user)
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            created = personal_token_create(user=request.user, **form.cleaned_data)
        except ApplicationError as error:
            if error.status in (403, 404):
                raise
            for detail in error.details or [{}]:
                path = detail.get("path")
                form.add_error(path if path in form.fields else None, error.message)
        else:
            form = PersonalTokenForm(user=request.user)
    context = {
        "form": form,
        "created": created,
        "tokens": token_rows(personal_tokens_of(request.user)),
        "max_days": MAX_DAYS,
        **account_second_factor_context(request),
    }
    return TemplateResponse(
        request, "accounts/account.html", context, status=400 if form.errors else 200
    )


@require_POST
def account_token_revoke(request, pk: int):
    """Revoke one of your own tokens (someone else's is 404 here)."""
    token = personal_tokens_of(request.user).filter(pk=pk).first()
    if token is None:
        raise NotFound("No such token.")
    personal_token_revoke(token=token, actor=request.user, reason=request.POST.get("reason", ""))
    messages.success(request, f"Revoked {token.name} ({token.prefix}…). It stops working now.")
    return redirect("account")


# --- everyone's personal API tokens (admins) -----------------------------------------------------
@require_GET
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def personal_token_admin_list(request):
    """Every person's API tokens, active first, each with Revoke."""
    tokens = token_rows(personal_tokens_all().order_by("revoked_at", "user__username", "name"))
    return TemplateResponse(request, "accounts/personal_token_admin_list.html", {"tokens": tokens})


@require_POST
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def personal_token_admin_revoke(request, pk: int):
    token = PersonalToken.objects.select_related("user").filter(pk=pk).first()
    if token is None:
        raise NotFound("No such token.")
    try:
        personal_token_revoke(
            token=token, actor=request.user, reason=request.POST.get("reason", "")
        )
    except ApplicationError as error:
        if error.status in (403, 404):
            raise
        messages.error(request, error.message)
    else:
        messages.success(
            request, f"Revoked {token.user.get_username()}’s token {token.name} ({token.prefix}…)."
        )
    return redirect("personal-token-admin-list")

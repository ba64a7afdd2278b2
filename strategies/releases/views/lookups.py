"""What the release pages share: the lookups from the URL (404 for anything unknown), the
version a page asks for, the confirm dialog's fields, and the whole page or its preview."""

from __future__ import annotations

from django.template.response import TemplateResponse
from django.urls import reverse

from console.kernel.errors import NotFound, ValidationFailed
from strategies.catalog.models import Environment
from strategies.catalog.selectors import environment_get
from strategies.documents.models import Document


# --- lookups from the URL (404 for anything unknown) -------------------------------------------------
def _document(agent, key: str) -> Document:
    document = Document.objects.filter(agent=agent, key=key).first()
    if document is None:
        raise NotFound(f"{agent.key} has no document '{key}'.")
    return document


def _environment(key: str) -> Environment:
    return environment_get(key=key)


def _int(value, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"{name} must be a whole number.") from exc


def _version(document: Document, number) -> object:
    number = _int(number, "version")
    version = (
        document.versions.filter(number=number).first()
        if number
        else document.versions.order_by("-number").first()
    )
    if version is None:
        raise NotFound(
            f"{document.key} has no version {number}."
            if number
            else f"{document.key} has no versions yet."
        )
    return version


def _overview_url(agent) -> str:
    return f"{reverse('release-overview')}?agent={agent.key}"


def _rollout_url(rollout) -> str:
    return reverse("rollout-page", args=[rollout.document.agent.key, rollout.pk])


# --- what the publish and rollback pages share ----------------------------------------------------
def _asked_version(request):
    """The version chosen on a publish or rollback page: the form's on POST, the version
    picker's (?version=) on GET."""
    source = request.POST if request.method == "POST" else request.GET
    return source.get("version")


def _confirmed(request) -> dict:
    """What the confirm dialog sends with every release move: the reason (kept in the history
    and the audit log) and the release revision the person saw (a stale one gets 409)."""
    return {
        "reason": request.POST.get("reason", "").strip(),
        "expected_revision": _int(request.POST.get("revision"), "revision"),
    }


def _page_or_preview(request, template: str, context: dict, error) -> TemplateResponse:
    """The whole page, or only its #preview partial when htmx asks for another version's
    preview (GET); with the refusal's status when a POST was refused."""
    if request.htmx and request.method == "GET":
        template += "#preview"
    return TemplateResponse(request, template, context, status=error.status if error else 200)

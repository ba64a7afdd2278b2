"""What the release pages share: the lookups from the URL (404 for anything unknown), the
version a page asks for, the confirm dialog's fields, and the whole page or its preview."""

from __future__ import annotations

from django.template.response import TemplateResponse
from django.urls import reverse

from console.kernel.errors import NotFound, ValidationFailed
from strategies.catalog.models import Environment
from strategies.catalog.selectors import environment_get
from strategies.documents.models import Document
from strategies.documents.regression_hook import regression_results


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


# --- what a go-live page warns of, and the confirmation it then needs ------------------------------
CONFIRMATION_REQUIRED = "confirmation_required"


def impact_danger(impact: dict | None) -> dict | None:
    """The warning of the saved preview a go-live rests on (traces get worse; nothing could
    be judged), or None (`traces.previews.selectors.impact_danger`, through the summary)."""
    return ((impact or {}).get("preview") or {}).get("danger")


def dangers_joined(dangers: list[dict]) -> dict | None:
    """Several documents' warnings as one (a promotion): one confirmation names them all."""
    dangers = [d for d in dangers if d]
    if len(dangers) <= 1:
        return dangers[0] if dangers else None
    kind = "worse" if any(d["kind"] == "worse" for d in dangers) else dangers[0]["kind"]
    return {
        "kind": kind,
        "title": "; ".join(d["title"] for d in dangers),
        "message": " ".join(d["message"] for d in dangers),
        "confirm": " ".join(d["confirm"] for d in dangers),
    }


def guards_danger(rollout) -> dict | None:
    """What the step's guards warn of before a person moves the rollout on by hand: a guard
    in breach (the new version does worse), or none able to judge yet."""
    guards = rollout.guards or []
    breached = [g.get("name", "?").replace("_", " ") for g in guards if g.get("state") == "breach"]
    step = f"step {rollout.step + 1}"
    if breached:
        names = ", ".join(breached)
        return {
            "kind": "worse",
            "title": f"The {names} guard{'s' if len(breached) > 1 else ''} breached at {step}",
            "message": f"v{rollout.version.number} does worse than v{rollout.control_version.number} "
            "on the evidence so far.",
            "confirm": f"The {names} guard breached at {step}, and I move it on anyway.",
        }
    if not any(g.get("state") == "ok" for g in guards):
        return {
            "kind": "nothing_judged",
            "title": f"Nothing could be judged at {step} yet",
            "message": "No guard has enough traffic to compare the two versions.",
            "confirm": f"Nothing could be judged at {step} yet, and I move it on without evidence.",
        }
    return None


def check_danger_confirmed(request, danger: dict | None) -> None:
    """Refuse (400 `confirmation_required`, nothing done) a go-live whose evidence warns,
    unless the person ticked the confirmation that names the warning."""
    if danger and request.POST.get("confirm_danger") != danger["kind"]:
        raise ValidationFailed(
            f"{danger['title']}: tick the confirmation to go on anyway.",
            code=CONFIRMATION_REQUIRED,
            details=[
                {
                    "path": "confirm_danger",
                    "code": CONFIRMATION_REQUIRED,
                    "message": danger["confirm"],
                }
            ],
        )


def version_regressions(request, version) -> list | None:
    """Each regression set of the strategy checked with `version`, as the publish, approval
    and rollout pages show them (traces.regressions, through the hook); None for a profile
    or a person who may not see kept requests."""
    if version is None or version.document.kind != Document.Kind.STRATEGY:
        return None
    document = version.document
    return regression_results(
        user=request.user,
        agent=document.agent,
        document_key=document.key,
        body=version.body,
        label=f"v{version.number}",
    )

"""The outcome kinds page of an environment: declare, change, retire or restore the kinds of
outcome its runtimes and applications may report. Thin: parse the form into a declaration,
call one service, render; a refusal keeps what was typed and shows each reason at its field.
"""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods, require_POST

from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, Everywhere, requires
from strategies.catalog.selectors import environment_get
from traces.outcomes import rules, selectors, services

ADMINS = requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)

TYPE_HELP = {
    "flag": "true or false — e.g. task_completed, escalated",
    "rating": "a whole number in a range — e.g. the user's rating 1–5",
    "label": "one of a list you give — e.g. refund, replacement, explained, other",
}


def _words(text: str) -> list[str]:
    return [part.strip() for part in (text or "").replace("\n", ",").split(",") if part.strip()]


def _number(text: str):
    text = (text or "").strip()
    try:
        return int(text) if text else None
    except ValueError:
        return text  # judged by rules.spec_findings: "a rating needs its range"


def _bad_values(kind_type: str, text: str) -> tuple:
    """The "counts as bad" field, read for the kind's type: true/false, numbers, labels."""
    values = []
    for word in _words(text):
        if kind_type == "flag" and word.lower() in ("true", "false"):
            values.append(word.lower() == "true")
        elif kind_type == "rating":
            number = _number(word)
            values.append(number)
        else:
            values.append(word)
    return tuple(values)


def spec_from_form(data, *, base: rules.KindSpec | None = None) -> rules.KindSpec:
    kind_type = base.type if base else (data.get("type") or "").strip()
    return rules.KindSpec(
        key=base.key if base else (data.get("key") or "").strip(),
        label=(data.get("label") or "").strip(),
        type=kind_type,
        rating_min=_number(data.get("rating_min")),
        rating_max=_number(data.get("rating_max")),
        choices=tuple(_words(data.get("choices"))),
        bad_values=_bad_values(kind_type, data.get("bad_values")),
        rate_label=(data.get("rate_label") or "").strip(),
    )


def form_values(spec: rules.KindSpec) -> dict:
    """A declaration as the form shows it again (after a refusal, or to edit)."""
    return {
        **spec.as_dict(),
        "choices": ", ".join(spec.choices),
        "bad_values": ", ".join(
            ("true" if v else "false") if isinstance(v, bool) else str(v) for v in spec.bad_values
        ),
        "rating_min": "" if spec.rating_min is None else spec.rating_min,
        "rating_max": "" if spec.rating_max is None else spec.rating_max,
    }


def _error_details(error: ApplicationError) -> list[dict]:
    return [d if isinstance(d, dict) else d.as_dict() for d in (error.details or [])] or [
        {"path": "", "code": error.code, "message": error.message}
    ]


@require_http_methods(["GET", "POST"])
@ADMINS
def kinds_page(request, environment):
    environment = environment_get(key=environment)
    values, errors, status = {"type": "flag"}, [], 200
    if request.method == "POST":
        spec = spec_from_form(request.POST)
        try:
            kind = services.outcome_kind_declare(
                environment=environment, spec=spec, actor=request.user
            )
        except ApplicationError as error:
            values, errors, status = form_values(spec), _error_details(error), error.status
        else:
            messages.success(request, f"{environment.key} now accepts outcomes of kind {kind.key}.")
            return redirect("outcome-kinds", environment=environment.key)
    kinds = selectors.outcome_kinds(environment=environment)
    counts = selectors.kind_counts(environment=environment)
    context = {
        "environment": environment,
        "kinds": [(kind, counts.get(kind.pk, 0)) for kind in kinds],
        "values": values,
        "errors": errors,
        "types": [(t, TYPE_HELP[t]) for t in rules.TYPES],
        "max_kinds": rules.MAX_KINDS_PER_ENVIRONMENT,
    }
    return TemplateResponse(request, "outcomes/kinds.html", context, status=status)


@require_http_methods(["GET", "POST"])
@ADMINS
def kind_edit(request, environment, kind):
    environment = environment_get(key=environment)
    kind = services.outcome_kind_get(environment=environment, key=kind)
    base = services.kind_spec(kind)
    values, errors, status = form_values(base), [], 200
    if request.method == "POST":
        spec = spec_from_form(request.POST, base=base)
        try:
            services.outcome_kind_update(kind=kind, spec=spec, actor=request.user)
        except ApplicationError as error:
            values, errors, status = form_values(spec), _error_details(error), error.status
        else:
            messages.success(request, f"Outcome kind {kind.key} saved.")
            return redirect("outcome-kinds", environment=environment.key)
    context = {
        "environment": environment,
        "kind": kind,
        "values": values,
        "errors": errors,
        "kind_help": TYPE_HELP[kind.type],
    }
    return TemplateResponse(request, "outcomes/kind_edit.html", context, status=status)


@require_POST
@ADMINS
def kind_retire(request, environment, kind):
    environment = environment_get(key=environment)
    kind = services.outcome_kind_get(environment=environment, key=kind)
    retired = request.POST.get("retired", "true") != "false"
    services.outcome_kind_retire(kind=kind, actor=request.user, retired=retired)
    if retired:
        messages.success(
            request,
            f"{kind.key} retired: new reports of it are refused; those stored stay and are shown.",
        )
    else:
        messages.success(request, f"{kind.key} restored: {environment.key} accepts it again.")
    return redirect("outcome-kinds", environment=environment.key)

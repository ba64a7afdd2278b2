"""The audit log and the access log: the pages, one change's detail, and the CSV download.

Thin views: parse the filters, ask the policy, read through console.access.selectors, render.
"""

from __future__ import annotations

import csv
import json
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from console.access.forms import LogFilterForm
from console.access.selectors import (
    change_rows,
    log_agent_keys,
    logs_filter,
    logs_visible_to,
)
from console.kernel.audit import (
    AUDIT_HASHED,
    CHAIN_FIELDS,
    OPTIONAL_HASHED,
    AccessAction,
    AgentRef,
    AuditAction,
    access_record,
)
from console.kernel.errors import NotFound
from console.kernel.models import AccessLogEntry, AuditRecord
from console.kernel.policy import (
    Capability,
    agents_where,
    refuse,
    requires,
)
from strategies.documents.models import Document

PAGE_SIZE = 50


# --- the logs -------------------------------------------------------------------------------------
def _log_page(request, model, actions):
    form = LogFilterForm(request.GET or None, actions=actions)
    rows = logs_filter(logs_visible_to(request.user, model), **form.filters())
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return {
        "form": form,
        "page_obj": page,
        "querystring": query.urlencode(),
        "filtered": any(v for k, v in request.GET.items() if k != "page"),
        "agent_keys": log_agent_keys(request.user),
    }


def _document_targets(user) -> list[str]:
    """Suggestions for the target filter: the documents of the agents the user audits."""

    agents = agents_where(user, Capability.VIEW_AUDIT)
    return [str(d) for d in Document.objects.filter(agent__in=agents).select_related("agent")]


@require_GET
@vary_on_headers("HX-Request")
@requires(Capability.VIEW_AUDIT, agent_kwarg=None, anywhere=True)
def audit_list(request):
    """Every change, newest first, filtered by agent, actor, action, target and time."""
    context = _log_page(request, AuditRecord, AuditAction)
    context["target_suggestions"] = _document_targets(request.user)
    return TemplateResponse(request, "access/audit_list.html", context)


@require_GET
@vary_on_headers("HX-Request")
@requires(Capability.VIEW_AUDIT, agent_kwarg=None, anywhere=True)
def audit_detail(request, pk: int):
    """One change with its field-level before/after (a fragment for the list's expander)."""
    record = logs_visible_to(request.user, AuditRecord).filter(pk=pk).first()
    if record is None:
        error = NotFound("No such audit record.")
        hidden = AuditRecord.objects.filter(pk=pk).values_list("agent_key", "agent_id").first()
        if hidden is None:
            raise error
        key, agent_id = hidden
        refuse(  # a row that exists, of an agent (or console-wide) out of the user's scope
            error,
            user=request.user,
            capability=Capability.VIEW_AUDIT,
            agent=AgentRef(key, agent_id) if key else None,  # the row's agent, not the key's
            target=("console.auditrecord", pk, f"audit record #{pk}"),
        )
    template = "access/audit_detail.html"
    if request.htmx:
        template += "#changes"
    context = {"record": record, "change_rows": change_rows(record.changes)}
    return TemplateResponse(request, template, context)


@require_GET
@requires(Capability.VIEW_AUDIT, agent_kwarg=None, anywhere=True)
def access_log_list(request):
    """Every look at traces, searches, snapshots and exports, and every refusal."""
    context = _log_page(request, AccessLogEntry, AccessAction)
    return TemplateResponse(request, "access/access_log_list.html", context)


def audit_list_url(**filters) -> str:
    """A link to the audit log with filters (for other pages: "history of this document")."""

    return reverse("audit-list") + ("?" + urlencode(filters) if filters else "")


# --- the audit log as CSV (the page's "Download CSV", with its filters) ---------------------------
# Every field of a row: the hashed ones, the token it was made with, the change, the chain.
CSV_COLUMNS = (
    "id",
    *CHAIN_FIELDS,
    *OPTIONAL_HASHED,
    *AUDIT_HASHED,
    "prev_hash",
    "hash",
)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value) -> str:
    """A value as a CSV cell that a spreadsheet shows as text: JSON for lists and dicts, and
    a leading quote for anything a spreadsheet would run as a formula (= + - @)."""
    if value is None:
        text = ""
    elif isinstance(value, list | dict):
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    else:
        text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class _Echo:
    def write(self, value):
        return value


@require_GET
@requires(Capability.VIEW_AUDIT, agent_kwarg=None, anywhere=True)
def audit_export_csv(request):
    """The audit rows the page shows (same filters, same visibility), newest first, streamed."""
    filters = LogFilterForm(request.GET or None, actions=AuditAction).filters()
    rows = logs_filter(logs_visible_to(request.user, AuditRecord), **filters)
    access_record(
        actor=request.user,
        action=AccessAction.AUDIT_EXPORT,
        target=("console.auditrecord", "", "audit log CSV"),
        detail={"format": "csv", "filters": {k: str(v) for k, v in filters.items() if v}},
    )
    writer = csv.writer(_Echo())

    def lines():
        yield writer.writerow(CSV_COLUMNS)
        for row in rows.iterator(chunk_size=1000):
            yield writer.writerow([csv_cell(getattr(row, c)) for c in CSV_COLUMNS])

    name = f"audit-{timezone.now():%Y%m%d-%H%M%S}.csv"
    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response

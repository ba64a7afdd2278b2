"""The release history page of an agent: its timeline, filtered by document and environment."""

from __future__ import annotations

from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods

from console.kernel.policy import Capability, requires
from strategies.catalog.selectors import environment_list
from strategies.documents.models import Document
from strategies.releases import selectors


# --- history ------------------------------------------------------------------------------------------------
@requires(Capability.VIEW_CONFIG)
@require_http_methods(["GET"])
def history(request, agent):
    document_key = request.GET.get("document", "")
    environment_key = request.GET.get("environment", "")
    page = selectors.history_page(
        agent=request.agent,
        document_key=document_key,
        environment_key=environment_key,
        page=request.GET.get("page", 1),
    )
    query = request.GET.copy()
    query.pop("page", None)
    return TemplateResponse(
        request,
        "releases/history.html",
        {
            "agent": request.agent,
            "page_obj": page,
            "querystring": query.urlencode(),
            "documents": Document.objects.filter(agent=request.agent).order_by("kind", "key"),
            "environments": environment_list(),
            "document_key": document_key,
            "environment_key": environment_key,
        },
    )

"""Promotion: publish to the target what is live in the source, all or nothing."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.policy import Capability, requires
from strategies.catalog.selectors import environment_get
from strategies.documents import selectors as documents
from strategies.releases import services as releases
from strategies.releases.api.common import TAGS, WRITE_ERRORS, _parse
from strategies.releases.serializers import PromoteRequest, PromotionSerializer
from strategies.releases.services import approval_state, release_state
from strategies.releases.services.change_records import change_record_state


# --- promotion ---------------------------------------------------------------------------------------
@extend_schema(
    summary="Publish to the target what is live in the source (one, some or all documents)",
    description="All or nothing. 200 when every changed document went live; 202 when any "
    "waits for approval (one request per changed document in a protected target). Each "
    "document's outcome: published, requested or unchanged.",
    request=PromoteRequest,
    responses={200: PromotionSerializer, 202: PromotionSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to publish to the target
def release_promote(request, agent):
    data = _parse(request, PromoteRequest)
    source = environment_get(key=data["source"])
    target = environment_get(key=data["target"])
    chosen = None
    if "documents" in data:
        chosen = [
            documents.document_get(agent=request.agent, key=key)
            for key in dict.fromkeys(data["documents"])
        ]
    outcome = releases.release_promote(
        agent=request.agent,
        source=source,
        target=target,
        documents=chosen,
        actor=request.user,
        reason=data["reason"],
    )
    body = {
        "source": source.key,
        "target": target.key,
        "results": [
            {
                "document": item.document.key,
                "outcome": item.outcome,
                "from_version": item.from_version,
                "to_version": item.to_version,
                "note": item.note,
                "release": release_state(item.release),
                "approval": approval_state(item.approval) if item.approval else None,
                "change_record": change_record_state(item.change_record)
                if item.change_record
                else None,
            }
            for item in outcome.items
        ],
    }
    return Response(body, status=202 if outcome.requested else 200)

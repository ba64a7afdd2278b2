"""What the release API's operations share: the body limit and tag, the documented error
responses, strict parsing of a body or a query, a page of results, and the 200-or-202
answer of a release change."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework.response import Response

from console.access.api import OperatorPagination
from console.kernel.api_schema import ErrorSerializer
from console.kernel.limits import check_request_size
from strategies.releases.services import approval_state, release_state
from strategies.releases.services.change_records import change_record_state

# A release request is a few small fields; anything near this is not one.
BODY_LIMIT = 16 * 1024
TAGS = ["releases"]


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


READ_ERRORS = {
    400: _error("Unknown or invalid filter."),
    403: _error("Not allowed on this agent."),
    404: _error("Unknown, or outside your scope."),
}
WRITE_ERRORS = {
    400: _error("Invalid input: unknown field, not publishable, not a rollback target."),
    403: _error("Not allowed (e.g. your own request, a sensitive section)."),
    404: _error("Unknown agent, document, version or environment, or outside your scope."),
    409: _error(
        "Stale revision, already live, already decided or a request already waits; "
        "`unreviewed_version`: a rollback to a version that went live unreviewed (during a "
        "break-glass). `current` holds the current state."
    ),
    413: _error("Body larger than 16 KiB."),
}


def _parse(request, serializer_class) -> dict:
    """Size limit first (nothing parsed for an oversize body), then the strict serializer."""
    check_request_size(request, BODY_LIMIT, what="A release request")
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _query(request, serializer_class) -> dict:
    serializer = serializer_class(data=request.query_params.dict())
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _page(request, items, serialize) -> Response:
    return _page_of(request, items, lambda page: [serialize(item) for item in page])


def _page_of(request, items, serialize_page) -> Response:
    """One page of `items`, `serialize_page(page)` giving its rows (a look at the whole page
    at once, e.g. one access-log row for it)."""
    paginator = OperatorPagination()  # at most OperatorPagination.max_limit rows
    page = paginator.paginate_queryset(items, request)
    return paginator.get_paginated_response(serialize_page(page))


def _outcome(outcome) -> Response:
    """200 {release} when it went live, 202 {approval} when it waits for a second person, 202
    {change_record} (and the approval, if any) when it waits for the external change system."""
    if getattr(outcome, "change_record", None) is not None:
        return Response(
            {
                "change_record": change_record_state(outcome.change_record),
                "approval": approval_state(outcome.approval) if outcome.approval else None,
            },
            status=202,
        )
    if outcome.approval is not None:
        return Response({"approval": approval_state(outcome.approval)}, status=202)
    return Response({"release": release_state(outcome.release)})

"""The release history of an agent, newest first, a page at a time."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view

from console.access.api import paginated
from console.kernel.policy import Capability, requires
from strategies.releases import selectors
from strategies.releases.api.common import READ_ERRORS, TAGS, _page, _query
from strategies.releases.serializers import HistoryFilter, ReleaseEventSerializer


@extend_schema(
    operation_id="v1_agents_releases_history_list",  # a page: named as the list it is
    summary="Release history of an agent, newest first",
    parameters=[HistoryFilter],
    responses={200: paginated(ReleaseEventSerializer), **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def release_history(request, agent):
    params = _query(request, HistoryFilter)
    events = selectors.history_events(
        agent=request.agent,
        document_key=params.get("document", ""),
        environment_key=params.get("environment", ""),
    )
    return _page(request, events, lambda e: ReleaseEventSerializer(e).data)

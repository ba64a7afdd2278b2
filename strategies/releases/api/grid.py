"""What is live per document × environment of an agent, and the requests that wait."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.policy import Capability, requires
from strategies.catalog.selectors import environment_list
from strategies.releases import selectors
from strategies.releases.api.common import READ_ERRORS, TAGS
from strategies.releases.serializers import AgentReleasesSerializer
from strategies.releases.services import approval_state, release_state, shadow_state


# --- what is live --------------------------------------------------------------------------------
@extend_schema(
    summary="What is live per document × environment, and the requests that wait",
    responses={200: AgentReleasesSerializer, **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def release_list(request, agent):
    rows = selectors.release_grid(user=request.user, agent=request.agent)
    return Response(
        {
            "agent": request.agent.key,
            "environments": [
                {
                    "key": env.key,
                    "name": env.name,
                    "position": env.position,
                    "protected": env.protected,
                    "rollback_needs_approval": env.rollback_needs_approval,
                }
                for env in environment_list()
            ],
            "documents": [
                {
                    "key": row.document.key,
                    "kind": row.document.kind,
                    "latest_version": row.latest.number if row.latest else None,
                    "releases": {
                        cell.environment.key: _release_out(row.document, cell) for cell in row.cells
                    },
                    "shadows": {
                        cell.environment.key: _shadow_out(row.document, cell) for cell in row.cells
                    },
                }
                for row in rows
            ],
            "pending": [
                approval_state(a) for a in selectors.pending_approvals(agents=[request.agent])
            ],
        }
    )


def _release_out(document, cell) -> dict | None:
    if cell.release is None:
        return None
    release = cell.release
    release.document, release.environment = document, cell.environment  # already loaded
    return release_state(release)


def _shadow_out(document, cell) -> dict | None:
    if cell.shadow is None:
        return None
    shadow = cell.shadow
    shadow.document, shadow.environment = document, cell.environment  # already loaded
    return shadow_state(shadow)

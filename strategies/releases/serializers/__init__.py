"""API shapes for releases, approvals and promotions, by job: `publish` (and rollback),
`shadow`, `approvals`, `promotion`, `grid` (what is live), `history` and `rollouts`; `common`
holds what several share. Requests are strict: unknown fields are refused so a typo never
silently does nothing.

Import from here: `from strategies.releases.serializers import PublishRequest`.
"""

from strategies.releases.serializers.approvals import (
    ApprovalDecisionSerializer,
    ApprovalFilter,
    ApproveRequest,
    RejectRequest,
    WithdrawRequest,
)
from strategies.releases.serializers.common import (
    REASON_MAX,
    ApprovalSerializer,
    ReleaseOutcomeSerializer,
    ReleaseSerializer,
)
from strategies.releases.serializers.grid import (
    AgentReleasesSerializer,
    DocumentReleasesSerializer,
    ReleaseEnvironmentSerializer,
)
from strategies.releases.serializers.history import HistoryFilter, ReleaseEventSerializer
from strategies.releases.serializers.promotion import (
    PromoteRequest,
    PromotionItemSerializer,
    PromotionSerializer,
)
from strategies.releases.serializers.publish import PublishRequest, RollbackRequest, VersionField
from strategies.releases.serializers.rollouts import (
    GuardStateSerializer,
    PlanField,
    PlanStepSerializer,
    RolloutActionRequest,
    RolloutFilter,
    RolloutOutcomeSerializer,
    RolloutSerializer,
    RolloutStartRequest,
    RolloutWatchSerializer,
)
from strategies.releases.serializers.shadow import (
    ShadowOutcomeSerializer,
    ShadowPromoteRequest,
    ShadowSerializer,
    ShadowStartRequest,
    ShadowStopRequest,
)

__all__ = [
    "REASON_MAX",
    "AgentReleasesSerializer",
    "ApprovalDecisionSerializer",
    "ApprovalFilter",
    "ApprovalSerializer",
    "ApproveRequest",
    "DocumentReleasesSerializer",
    "GuardStateSerializer",
    "HistoryFilter",
    "PlanField",
    "PlanStepSerializer",
    "PromoteRequest",
    "PromotionItemSerializer",
    "PromotionSerializer",
    "PublishRequest",
    "RejectRequest",
    "ReleaseEnvironmentSerializer",
    "ReleaseEventSerializer",
    "ReleaseOutcomeSerializer",
    "ReleaseSerializer",
    "RollbackRequest",
    "RolloutActionRequest",
    "RolloutFilter",
    "RolloutOutcomeSerializer",
    "RolloutSerializer",
    "RolloutStartRequest",
    "RolloutWatchSerializer",
    "ShadowOutcomeSerializer",
    "ShadowPromoteRequest",
    "ShadowSerializer",
    "ShadowStartRequest",
    "ShadowStopRequest",
    "VersionField",
    "WithdrawRequest",
]

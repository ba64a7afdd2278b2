"""What a rollout step has shown so far: the contract between the selector that reads the
counters (`traces.rollouts.selectors.step_evidence`) and the pure guards
(`traces.rollouts.guards.evaluate`). Frozen dataclasses, no Django: the evaluator hands them
across, never models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

ARMS = ("new", "old")
# The paired kinds: on one request, the new version worse than the old one.
PAIRED_STATUS = "status"  # new's status not usable (ready, degraded) while old's is
PAIRED_REQUIRED_LOST = "required_lost"  # a required item both require: old selected it, new not
PAIRED_TOKENS = "tokens"  # new's input tokens > 1.2 × old's
PAIRED_KINDS = (PAIRED_STATUS, PAIRED_REQUIRED_LOST, PAIRED_TOKENS)
USABLE_STATUSES = frozenset({"ready", "degraded"})
TOKENS_WORSE_RATIO = 1.2
SAMPLE_IDS = 5  # request ids kept per paired kind per (rollout, step)


def _empty() -> MappingProxyType:
    return MappingProxyType({})


def both_failed_kind(source: str) -> str:
    """The sample key of the requests where neither version had `source` (attribution)."""
    return f"not_fetched_both:{source}"


@dataclass(frozen=True)
class ArmEvidence:
    """One arm's totals over the step: traces served by that arm's version."""

    traces: int = 0
    usable: int = 0
    config_fallback: int = 0
    compared: int = 0  # traces with the other version's decision (a shadow block with a status)
    # source → traces where the served version did not fetch it
    not_fetched: MappingProxyType = field(default_factory=_empty)
    # source → of the compared traces, those where neither version had it
    not_fetched_both: MappingProxyType = field(default_factory=_empty)
    # outcome kind → outcomes reported; of them, the kind's bad value
    outcomes: MappingProxyType = field(default_factory=_empty)
    outcomes_bad: MappingProxyType = field(default_factory=_empty)

    @property
    def usable_rate(self) -> float | None:
        return self.usable / self.traces if self.traces else None


@dataclass(frozen=True)
class PairedCount:
    """Requests where the new version was worse in one way, and the first of them."""

    requests: int = 0
    request_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProviderBaseline:
    """How often each provider failed in the environment before the rollout began: its
    latest requests of the rollout's agent and strategy (not those of any rollout), the
    share where the source was not fetched. What the attribution guard judges against: a
    provider that fails as often as it did before is not an outage."""

    traces: int = 0
    not_fetched: MappingProxyType = field(default_factory=_empty)  # source → traces

    def rate(self, source: str, *, minimum: int) -> float | None:
        """The share of requests that missed `source` before; None with fewer than
        `minimum` requests to tell."""
        if self.traces < max(minimum, 1):
            return None
        return self.not_fetched.get(source, 0) / self.traces


@dataclass(frozen=True)
class StepEvidence:
    rollout_key: str
    step: int
    since: datetime
    share: float | None  # the step's share of arm new (None: the rollout is not known here)
    new: ArmEvidence = field(default_factory=ArmEvidence)
    old: ArmEvidence = field(default_factory=ArmEvidence)
    # kind → PairedCount
    paired: MappingProxyType = field(default_factory=_empty)
    # source → requests where NEITHER version had it (live did not fetch it, and the other
    # version reads it): a provider failing, not a version.
    not_fetched_both: MappingProxyType = field(default_factory=_empty)
    # source → the first of those requests (their ids, for the attribution's evidence)
    not_fetched_both_ids: MappingProxyType = field(default_factory=_empty)
    # fault → traces stored but not counted as evidence (traces.rollouts.counters.FAULT_*)
    faults: MappingProxyType = field(default_factory=_empty)
    # the failing providers' rates before the rollout (read only for sources in
    # not_fetched_both: nothing to judge otherwise)
    baseline: ProviderBaseline = field(default_factory=ProviderBaseline)

    def arm(self, name: str) -> ArmEvidence:
        return self.new if name == "new" else self.old

    @property
    def compared(self) -> int:
        """Requests with both versions' decisions: the denominator of the paired shares."""
        return self.new.compared + self.old.compared

    def paired_count(self, kind: str) -> PairedCount:
        return self.paired.get(kind) or PairedCount()

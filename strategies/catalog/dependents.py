"""What the catalog asks of the jobs that build on it.

Every job's rows name an agent or an environment, so every job imports the catalog, and the
catalog cannot import them back (a cycle; lint-imports' acyclic_siblings contract). What the
catalog needs to know of them it asks here instead, and each job answers with its own
selectors and services, registered once at app start (StrategiesConfig.ready,
TracesConfig.ready):

- what of theirs refers to an agent or environment and is kept: why deleting it is refused
  (`references_to_agent`, `references_to_environment`);
- the documents job's part of an agent: the context profile made with it, the drafts and
  documents deleted with it, its documents listed with it (`agent_documents`);
- what each job stops when an environment is archived (`environment_archived`): releases stop
  the rollouts and shadows running there;
- whether an agent's runtime sent a trace yet (`agent_has_traces`, the onboarding's last
  step): traces answers; strategies never imports traces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from strategies.catalog.models import Agent, Environment


@dataclass(frozen=True)
class Reference:
    """Something of another job's that refers to an agent or environment and is kept."""

    code: str  # e.g. has_releases
    message: str  # e.g. "it has releases: documents live in an environment"

    def as_detail(self) -> dict:
        return {"path": "", "code": self.code, "message": self.message}


# A refusal lists its reasons in this order, whichever job registered first (a code not
# listed goes last): the order they were listed in when the catalog read every table itself.
REASON_ORDER = (
    "has_releases",
    "has_traces",
    "has_frozen_versions",
    "has_runtime_tokens",
    "has_personal_tokens",
    "has_manifests",
    "has_approval_requests",
    "has_webhooks",
)

_agent_askers: dict[str, Callable[[Agent], list[Reference]]] = {}
_environment_askers: dict[str, Callable[[Environment], list[Reference]]] = {}


def _asker_name(asker) -> str:
    return f"{asker.__module__}.{asker.__qualname__}"


def register_references(*, agent=None, environment=None) -> None:
    """Register a job's selectors `agent -> [Reference]`, `environment -> [Reference]`.
    Registering one twice (ready() run again) changes nothing."""
    if agent is not None:
        _agent_askers[_asker_name(agent)] = agent
    if environment is not None:
        _environment_askers[_asker_name(environment)] = environment


def _in_order(references: list[Reference]) -> list[Reference]:
    rank = {code: i for i, code in enumerate(REASON_ORDER)}
    return sorted(references, key=lambda r: rank.get(r.code, len(REASON_ORDER)))


def references_to_agent(agent: Agent) -> list[Reference]:
    """What every other job keeps that refers to `agent` (empty: nothing)."""
    return _in_order([r for ask in _agent_askers.values() for r in ask(agent)])


def references_to_environment(environment: Environment) -> list[Reference]:
    """What every other job keeps that refers to `environment` (empty: nothing)."""
    return _in_order([r for ask in _environment_askers.values() for r in ask(environment)])


@dataclass(frozen=True)
class AgentDocuments:
    """The documents job's answers about an agent's documents."""

    # (agent=, actor=): the context profile a new agent starts with, audited
    profile_create: Callable[..., object]
    # (agent=): its drafts and documents, deleted with it (frozen versions refuse the delete)
    delete_with_agent: Callable[..., None]
    # (): a Prefetch of an agent's documents in list order
    prefetch: Callable[[], object]


_registered: dict[str, AgentDocuments] = {}


def register_agent_documents(documents: AgentDocuments) -> None:
    """The documents job's answers (one job answers; registering again replaces them)."""
    _registered["documents"] = documents


def agent_documents() -> AgentDocuments:
    if "documents" not in _registered:
        raise RuntimeError("The documents job registers its part of an agent at app start.")
    return _registered["documents"]


# (environment, actor=, reason=) -> None: a job's part of archiving an environment, run in the
# archive's transaction.
_archive_listeners: dict[str, Callable[..., None]] = {}


def register_archive_listener(listener: Callable[..., None]) -> None:
    """Register what a job stops when an environment is archived (registering twice changes
    nothing)."""
    _archive_listeners[_asker_name(listener)] = listener


def environment_archived(environment: Environment, *, actor, reason: str = "") -> None:
    """Every job stops what it runs in `environment`, just archived (audited by each job)."""
    for listener in _archive_listeners.values():
        listener(environment, actor=actor, reason=reason)


# (agent) -> bool: whether the agent's runtime sent a trace yet (traces answers at app start).
_trace_askers: dict[str, Callable[[Agent], bool]] = {}


def register_trace_asker(asker: Callable[[Agent], bool]) -> None:
    """Traces' answer to `agent_has_traces` (registering again replaces it)."""
    _trace_askers["traces"] = asker


def agent_has_traces(agent: Agent) -> bool:
    """Whether the agent's runtime sent a trace yet; False without traces installed."""
    asker = _trace_askers.get("traces")
    return bool(asker is not None and asker(agent))


# --- data protection (issue 34.4, docs/data-protection.md) -----------------------------------------
# What a runtime says about itself (a heartbeat, a manifest, the process that sent it) goes
# through its environment's redaction rules like its traces do: traces registers the guard at
# app start. `text` names the top-level fields that are free text (the runtime's name, which is
# redacted); every other string and key is an identifier, where personal data refuses the
# report (400 personal_data). The guard fails closed (503 redaction_unavailable).
_runtime_report_guard: Callable | None = None


def register_runtime_report_guard(guard) -> None:
    global _runtime_report_guard
    _runtime_report_guard = guard


def runtime_report_guarded(environment_id: int, body, *, text: tuple[str, ...] = ("runtime",)):
    """`body` (decoded JSON) as the environment's redaction rules leave it."""
    if _runtime_report_guard is None:
        return body
    return _runtime_report_guard(environment_id, body, text)

"""The publish judgement's question to the impact previews (traces.previews).

An environment may require a preview before a publish (`Environment.require_preview`): the
judgement (`selectors.body_publish_refusals`) must then ask whether a complete, recent preview
of the same content exists. Previews live in traces, which imports strategies, so strategies
cannot import it back: traces.previews registers its answer here at app start
(PreviewsConfig.ready), as the jobs answer the catalog through strategies.catalog.dependents.
"""

from __future__ import annotations

from collections.abc import Callable

from context_runtime.findings import Finding

# (agent=, environment=, document_key=, body=, actor=, now=) -> a finding (a refusal, or a
# flag that the preview covered few traces) or None when a good preview exists; `now`: the
# moment freshness is measured from (a deferred go-live's request or start).
PreviewJudge = Callable[..., Finding | None]

# (user=, version=, environment=) -> what the publish and approval pages show of the saved
# preview of that version there (a dict, see traces.previews.selectors.preview_summary), or
# None for a profile.
PreviewSummary = Callable[..., dict | None]

_judges: dict[str, PreviewJudge] = {}
_summaries: dict[str, PreviewSummary] = {}


def register_preview_judge(judge: PreviewJudge) -> None:
    """The previews' answer (one job answers; registering again replaces it)."""
    _judges["previews"] = judge


def register_preview_summary(summary: PreviewSummary) -> None:
    """The previews' summary for the publish and approval pages."""
    _summaries["previews"] = summary


def preview_summary(*, user, version, environment) -> dict | None:
    """The saved impact preview of `version` in `environment` as the publish and approval
    pages show it; None without previews installed, or for a profile."""
    summary = _summaries.get("previews")
    if summary is None:
        return None
    return summary(user=user, version=version, environment=environment)


def preview_finding(
    *, agent, environment, document_key: str, body, actor, at=None
) -> Finding | None:
    """What the previews say to publishing `body` in `environment` when it requires one: a
    preview counts when it finished at most a day before `at` (now unless given: a deferred
    go-live passes its request's or rollout's start) or later. Without a registered judge
    (previews not installed) a required preview cannot exist."""
    judge = _judges.get("previews")
    if judge is None:
        return Finding(
            "environment",
            "preview_required",
            f"{environment.key} requires an impact preview before a publish, and previews are "
            "not available in this installation.",
        )
    return judge(
        agent=agent,
        environment=environment,
        document_key=document_key,
        body=body,
        actor=actor,
        now=at,
    )

"""The step plans of a staged rollout (issue 23): its templates and the one check of a plan.

A plan is a list of steps `{"share": float, "bake_seconds": int}`: the share of units served
the new version during the step (0.0 is a shadow step: everyone gets the old version and the
new one runs beside it; 1.0 everyone the new one, the old as shadow) and how long the step
bakes before it may move on. Shares only grow, so a unit keeps its arm from step to step
(the runtime assigns by a stable hash of the rollout id and the unit).
"""

from __future__ import annotations

import hashlib
import json

from context_runtime.findings import Finding

STAGED = "staged"
ALL_AT_ONCE = "all_at_once"
CUSTOM = "custom"
TEMPLATES: dict[str, list[dict]] = {
    # shadow → 10% → 50% → 100%, 10 min bake each, 30 min final bake (AWS AppConfig flags a
    # final bake under 30 minutes). The default where the environment is protected.
    STAGED: [
        {"share": 0.0, "bake_seconds": 600},
        {"share": 0.1, "bake_seconds": 600},
        {"share": 0.5, "bake_seconds": 600},
        {"share": 1.0, "bake_seconds": 1800},
    ],
    # Everyone at once, watched for 10 minutes (the old version runs as shadow meanwhile).
    ALL_AT_ONCE: [{"share": 1.0, "bake_seconds": 600}],
}
TEMPLATE_LABELS = {
    STAGED: "Staged: shadow → 10% → 50% → 100% (10 min bakes, 30 min final bake)",
    ALL_AT_ONCE: "All at once, with a 10 min watch",
    CUSTOM: "Custom steps",
}
MAX_STEPS = 20
MAX_BAKE_SECONDS = 7 * 24 * 3600
SHORT_FINAL_BAKE_SECONDS = 1800
INVALID_PLAN = "invalid_plan"
UNITS = ("task", "principal")


def plan_findings(plan) -> list[Finding]:
    """Why `plan` is no plan (empty: it is one): a list of 1 to 20 steps, each a share in
    [0, 1] that never goes down and a bake of 1 s to 7 days, ending at share 1.0 (the rollout
    completes everyone on the new version)."""
    if not isinstance(plan, list) or not plan:
        return [Finding("plan", INVALID_PLAN, "A plan is a list of steps (share, bake_seconds).")]
    if len(plan) > MAX_STEPS:
        return [Finding("plan", INVALID_PLAN, f"A plan has at most {MAX_STEPS} steps.")]
    findings = []
    previous = 0.0
    for index, step in enumerate(plan):
        path = f"plan[{index}]"
        if not isinstance(step, dict) or set(step) != {"share", "bake_seconds"}:
            findings.append(
                Finding(path, INVALID_PLAN, "A step has exactly a share and bake_seconds.")
            )
            continue
        share, bake = step["share"], step["bake_seconds"]
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
            findings.append(Finding(f"{path}.share", INVALID_PLAN, "A share is from 0.0 to 1.0."))
        elif share < previous:
            findings.append(
                Finding(
                    f"{path}.share",
                    INVALID_PLAN,
                    f"Shares only grow (a unit keeps its arm): {share} comes after {previous}.",
                )
            )
        else:
            previous = share
        if isinstance(bake, bool) or not isinstance(bake, int) or not 1 <= bake <= MAX_BAKE_SECONDS:
            findings.append(
                Finding(
                    f"{path}.bake_seconds",
                    INVALID_PLAN,
                    "A bake is a whole number of seconds, from 1 to 7 days.",
                )
            )
    if not findings and plan[-1]["share"] != 1:
        findings.append(
            Finding(
                f"plan[{len(plan) - 1}].share",
                INVALID_PLAN,
                "The last step serves everyone the new version (share 1.0).",
            )
        )
    return findings


def plan_resolve(plan) -> tuple[str, list[dict]]:
    """(template name, steps) for a template's name or a custom list of steps. Raises
    ValueError (with the findings' messages) for anything else."""
    if isinstance(plan, str):
        if plan not in TEMPLATES:
            raise ValueError(f"Unknown plan template {plan!r}: {', '.join(TEMPLATES)} or steps.")
        return plan, [dict(step) for step in TEMPLATES[plan]]
    findings = plan_findings(plan)
    if findings:
        raise ValueError(" ".join(f.message for f in findings))
    steps = [{"share": float(s["share"]), "bake_seconds": int(s["bake_seconds"])} for s in plan]
    return CUSTOM, steps


def plan_hash(plan: list[dict]) -> str:
    """What an approval of the plan is bound to, with the version's content hash."""
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()


def short_final_bake(plan: list[dict]) -> bool:
    """A final bake under 30 minutes (shown as a warning, as AWS AppConfig flags it)."""
    return plan[-1]["bake_seconds"] < SHORT_FINAL_BAKE_SECONDS

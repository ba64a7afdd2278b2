"""`{% trace_rollout trace as rollout %}`: the staged rollout a trace's request was part of,
for the trace page's Rollout line (rollouts/_trace_rollout.html), so it can say "the new
version (v5)", "step 1 of 3" — the words of the rollout page — where the trace carries only
the wire's arm and 0-based step index. The page itself is the look at the trace; this reads
what belongs to it (the trace's agent's rollout, or nothing)."""

from __future__ import annotations

from django import template

from strategies.releases.selectors import rollout_of_trace

register = template.Library()


@register.simple_tag
def trace_rollout(trace):
    """The rollout named by the trace's rollout block, within the trace's agent; None for a
    key no rollout of that agent has (a runtime may send anything)."""
    return rollout_of_trace(agent_id=trace.agent_id, key=trace.rollout_key)

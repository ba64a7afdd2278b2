"""`{% trace_outcomes trace as outcomes %}`: the outcomes reported for a trace's request in its
environment, for the trace page's Outcomes card (outcomes/_trace_outcomes.html). The page
itself is the look at the trace (access-logged by its view); this reads what belongs to it."""

from __future__ import annotations

from django import template

from traces.health.selectors import outcome_shares
from traces.outcomes.rules import value_key
from traces.outcomes.selectors import outcomes_for_requests

register = template.Library()


@register.simple_tag(takes_context=True)
def trace_outcomes(context, trace) -> list:
    """(outcome, share) pairs: each outcome of the request, and how often the trace's version
    had that outcome in its environment lately (None when nothing is counted)."""
    found = outcomes_for_requests(
        environment_id=trace.environment_id, request_ids=[trace.request_id]
    ).get(trace.request_id, [])
    shares = outcome_shares(user=context["request"].user, trace=trace) if found else None
    return [(o, (shares or {}).get((o.kind, value_key(o.value)))) for o in found]

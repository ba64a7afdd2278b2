"""`{% trace_outcomes trace as outcomes %}`: the outcomes reported for a trace's request in its
environment, for the trace page's Outcomes card (outcomes/_trace_outcomes.html). The page
itself is the look at the trace (access-logged by its view); this reads what belongs to it."""

from __future__ import annotations

from django import template

from traces.outcomes.selectors import outcomes_for_requests

register = template.Library()


@register.simple_tag
def trace_outcomes(trace) -> list:
    found = outcomes_for_requests(
        environment_id=trace.environment_id, request_ids=[trace.request_id]
    )
    return found.get(trace.request_id, [])

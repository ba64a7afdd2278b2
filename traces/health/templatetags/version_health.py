"""Template tags of the version-health glances: the release rows, the dashboard and the trace
page each include one small template that asks here. The figures of one agent are read once
per page (kept on the agent object the page loops over)."""

from __future__ import annotations

from django import template

from traces.health import selectors

register = template.Library()


def _glances_of(context, agent) -> dict:
    found = getattr(agent, "_health_glances", None)
    if found is None:
        user = context["request"].user
        found = selectors.glances(user=user, agents=[agent]).get(agent.pk, {})
        agent._health_glances = found
    return found


@register.simple_tag(takes_context=True)
def release_glance(context, agent, document_key: str, environment_key: str):
    """The Glance of a release cell, or None (nothing live, or no right to view traces)."""
    return _glances_of(context, agent).get((document_key, environment_key))


@register.simple_tag(takes_context=True)
def agent_glances(context, agent) -> list:
    """The agent's live versions with their health, by environment order then document."""
    return sorted(
        _glances_of(context, agent).values(),
        key=lambda g: (g.release.environment.position, g.release.document),
    )


@register.simple_tag(takes_context=True)
def trace_patterns(context, trace, groups=None):
    """The trace page's candidates (its decision groups) are passed in: no query of them."""
    candidates = None if groups is None else [c for g in groups for c in g.candidates]
    return selectors.trace_patterns(
        user=context["request"].user, trace=trace, candidates=candidates
    )


@register.filter
def pct(value, digits: int = 1) -> str:
    """0.01234 → '1.2%'; None → '—'."""
    if value is None:
        return "—"
    return f"{value * 100:.{int(digits)}f}%"


@register.filter
def get_item(mapping, key):
    """mapping[key] in a template (a column's cell, a column's series); None when absent."""
    return mapping.get(key) if mapping else None

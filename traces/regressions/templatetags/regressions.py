"""The trace page's "keep in a regression set" card asks here (traces.regressions.selectors)."""

from __future__ import annotations

from html import escape

from django import template
from django.utils.safestring import SafeString, mark_safe

from traces.regressions import selectors

register = template.Library()


@register.simple_tag(takes_context=True)
def keep_card(context, trace):
    """On the trace page, the candidates (its groups) and the strategy's versions (the Replay
    card's choices) are read already: the card reuses them rather than reading them again."""
    groups = context.get("groups")
    candidates = [c for g in groups for c in g.candidates] if groups is not None else None
    replay_card = context.get("replay_card")
    versions = [c.number for c in replay_card.choices] if replay_card is not None else None
    return selectors.keep_card(
        user=context["request"].user, trace=trace, candidates=candidates, versions=versions
    )


@register.simple_tag
def options(values, selected="") -> SafeString:
    """``{% options card.items form.item %}``: an <option> per value, the chosen one selected.
    In Python: the card lists every item and bundle of the request (often a hundred), which
    the template language took over a millisecond to loop through."""
    selected = str(selected)
    return mark_safe(  # noqa: S308 (every value escaped)
        "".join(
            f"<option{' selected' if str(value) == selected else ''}>{escape(str(value))}</option>"
            for value in values
        )
    )

"""The trace page's "keep in a regression set" card asks here (traces.regressions.selectors)."""

from __future__ import annotations

from django import template

from traces.regressions import selectors

register = template.Library()


@register.simple_tag(takes_context=True)
def keep_card(context, trace):
    return selectors.keep_card(user=context["request"].user, trace=trace)

"""What a trace's codes mean in an operator's words (traces.diagnosis), for templates."""

from __future__ import annotations

from django import template

from traces.diagnosis import reason_words as _reason_words

register = template.Library()


@register.filter
def reason_words(code) -> str:
    """``{{ row.code|reason_words }}``: a reason code in words."""
    return _reason_words(code)

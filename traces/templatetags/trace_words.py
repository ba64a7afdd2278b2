"""What a trace's codes mean in an operator's words (traces.diagnosis), for templates."""

from __future__ import annotations

from html import escape

from django import template
from django.utils.safestring import SafeString, mark_safe

from traces.diagnosis import reason_words as _reason_words

register = template.Library()


@register.filter
def reason_words(code) -> str:
    """``{{ row.code|reason_words }}``: a reason code in words."""
    return _reason_words(code)


# The markup below is written with the standard library's `html.escape` (what Django's
# `escape` runs, without its per-value lazy-text check): a trace page shows up to a few
# hundred candidates, and the template language spent about 7 ms on 50 rows, most of the
# page's 20 ms budget at 10M traces. Every value from a trace goes through `escape`.


def _reason_html(code: str, text: str) -> str:
    if not code:
        return escape(text or "")
    words = escape(text or _reason_words(code))
    code = escape(code)
    return (
        f'<span class="help-term reason" title="reason code: {code}" '
        f'data-reason-code="{code}">{words}</span>'
    )


@register.simple_tag
def reason(code, text="") -> SafeString:
    """``{% reason code text %}``: why the engine decided as it did, the words in front and the
    reason code one hover away (title), never the code alone. `text` is the runtime's own
    sentence (a candidate's reason); without it the code's words."""
    return mark_safe(_reason_html(str(code or ""), str(text or "")))  # noqa: S308 (escaped)


_REQUIRED_TAG = ' <span class="tag stack-only">required</span>'
_REQUIRED = "<strong>required</strong>"
_OPTIONAL = '<span class="muted">optional</span>'


def _candidate_row(c, selected: bool) -> str:
    required = c.required
    row_class = "row-bad" if required and not selected else ""
    version = escape(c.version) if c.version else "—"
    size = "—" if c.size is None else int(c.size)
    bundle = escape(c.bundle)
    bundle_class = "" if bundle else " stack-empty"
    return (
        f'<tr id="candidate-{int(c.position)}" class="{row_class}">'
        f'<td class="stack-key"><code>{escape(c.item_id)}</code>'
        f"{_REQUIRED_TAG if required else ''}</td>"
        f'<td data-label="Source">{escape(c.source)}</td>'
        f'<td data-label="Version" class="mono small">{version}</td>'
        f'<td data-label="Size" class="num">{size}</td>'
        f'<td data-label="Required" class="stack-hide">{_REQUIRED if required else _OPTIONAL}</td>'
        f'<td data-label="Bundle" class="mono small{bundle_class}">{bundle}</td>'
        f'<td data-label="Reason" class="candidate-reason">{_reason_html(c.reason_code, c.reason)}</td>'
        "</tr>"
    )


@register.simple_tag
def candidate_rows(group) -> SafeString:
    """``{% candidate_rows group %}``: the Candidates table's rows of one decision group
    (traces.selectors.CandidateGroup); a required item left out is marked bad."""
    selected = group.decision == "selected"
    rows = "".join(_candidate_row(c, selected) for c in group.candidates)
    return mark_safe(rows)  # noqa: S308 (every value escaped in _candidate_row)

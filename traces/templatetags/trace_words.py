"""What a trace's codes mean in an operator's words (traces.diagnosis), for templates."""

from __future__ import annotations

from django import template
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from traces.diagnosis import reason_words as _reason_words

register = template.Library()


@register.filter
def reason_words(code) -> str:
    """``{{ row.code|reason_words }}``: a reason code in words."""
    return _reason_words(code)


@register.simple_tag
def reason(code, text="") -> SafeString:
    """``{% reason code text %}``: why the engine decided as it did, the words in front and the
    reason code one hover away (title), never the code alone. `text` is the runtime's own
    sentence (a candidate's reason); without it the code's words."""
    if not code:
        return conditional_escape(text or "")
    return format_html(
        '<span class="help-term reason" title="reason code: {0}" data-reason-code="{0}">{1}</span>',
        code,
        text or _reason_words(code),
    )


# Python, not template markup: a trace page shows up to a few hundred candidates, and the
# template language spent about 7 ms on 50 rows (most of the page's 20 ms budget at 10M traces).
_CANDIDATE_ROW = (
    '<tr id="candidate-{position}" class="{row_class}">'
    '<td class="stack-key"><code>{item_id}</code>{required_tag}</td>'
    '<td data-label="Source">{source}</td>'
    '<td data-label="Version" class="mono small">{version}</td>'
    '<td data-label="Size" class="num">{size}</td>'
    '<td data-label="Required" class="stack-hide">{required}</td>'
    '<td data-label="Bundle" class="mono small{bundle_class}">{bundle}</td>'
    '<td data-label="Reason" class="candidate-reason">{reason}</td>'
    "</tr>"
)
_REQUIRED = mark_safe("<strong>required</strong>")
_OPTIONAL = mark_safe('<span class="muted">optional</span>')
_REQUIRED_TAG = mark_safe(' <span class="tag stack-only">required</span>')


@register.simple_tag
def candidate_rows(group) -> SafeString:
    """``{% candidate_rows group %}``: the Candidates table's rows of one decision group
    (traces.selectors.CandidateGroup); a required item left out is marked bad."""
    selected = group.decision == "selected"
    return format_html_join(
        "",
        "{}",
        (
            (
                format_html(
                    _CANDIDATE_ROW,
                    position=c.position,
                    row_class="row-bad" if c.required and not selected else "",
                    item_id=c.item_id,
                    required_tag=_REQUIRED_TAG if c.required else "",
                    source=c.source,
                    version=c.version or "—",
                    size="—" if c.size is None else c.size,
                    required=_REQUIRED if c.required else _OPTIONAL,
                    bundle_class="" if c.bundle else " stack-empty",
                    bundle=c.bundle or "",
                    reason=reason(c.reason_code, c.reason),
                ),
            )
            for c in group.candidates
        ),
    )

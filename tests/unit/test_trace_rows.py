"""The trace page's Candidates rows and the keep card's options are written in Python, not the
template language (issue 36: the page's 20 ms at 10M traces). What a runtime sends is text
from outside: it must come out escaped, and the rows must say what the template said."""

from __future__ import annotations

from context_runtime import wire
from django.template import Context, Template

from traces.regressions.templatetags.regressions import options
from traces.selectors import candidate_groups
from traces.stored import StoredCandidate
from traces.templatetags.trace_words import candidate_rows, reason

HOSTILE = '<script>alert("x")</script>'


def stored(position: int, **fields) -> StoredCandidate:
    return StoredCandidate(position, wire.Candidate(**{"source": "crm", **fields}))


def test_candidate_rows__text_from_the_runtime__escaped_never_markup():
    group = candidate_groups(
        [
            stored(
                0,
                id=HOSTILE,
                source=HOSTILE,
                decision="no_access",
                reason=HOSTILE,
                version=HOSTILE,
                bundle=HOSTILE,
            )
        ]
    )[0]
    html = candidate_rows(group)
    assert "<script>" not in html
    assert html.count("&lt;script&gt;") == 5  # item, source, version, bundle, reason


def test_candidate_rows__required_item_left_out__row_marked_bad_selected_one_not():
    groups = candidate_groups(
        [
            stored(0, id="policy", decision="selected", required=True, size=120),
            stored(
                1,
                id="profile",
                decision="not_fetched",
                required=True,
                reason_code="below_threshold",
            ),
            stored(2, id="faq", decision="irrelevant", required=False),
        ]
    )
    selected, not_fetched, irrelevant = (str(candidate_rows(g)) for g in groups)
    assert 'id="candidate-0" class=""' in selected and "<strong>required</strong>" in selected
    assert 'id="candidate-1" class="row-bad"' in not_fetched
    assert 'class="tag stack-only">required' in not_fetched
    assert 'id="candidate-2" class=""' in irrelevant and ">optional<" in irrelevant


def test_candidate_rows__no_version_no_size_no_bundle__dashes_and_an_empty_bundle_cell():
    (group,) = candidate_groups([stored(3, id="faq", decision="irrelevant")])
    html = str(candidate_rows(group))
    assert '<td data-label="Version" class="mono small">—</td>' in html
    assert '<td data-label="Size" class="num">—</td>' in html
    assert 'class="mono small stack-empty"></td>' in html


def test_reason__code_without_text__its_words_in_front_the_code_on_hover():
    html = str(reason("below_threshold", ""))
    assert html == (
        '<span class="help-term reason" title="reason code: below_threshold" '
        'data-reason-code="below_threshold">not relevant enough</span>'
    )
    assert str(reason("", "the runtime's own words")) == "the runtime&#x27;s own words"


def test_reason_component__include_and_tag__same_markup():
    include = Template('{% include "_components/reason.html" with code=code text=text %}').render(
        Context({"code": "budget_exceeded", "text": HOSTILE})
    )
    assert include.strip() == str(reason("budget_exceeded", HOSTILE))
    assert "<script>" not in include


def test_options__chosen_value_selected__values_escaped():
    html = str(options(["a", HOSTILE, "c"], "c"))
    assert html == (
        "<option>a</option>"
        "<option>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</option>"
        "<option selected>c</option>"
    )


def test_reason__hostile_code__escaped_once_not_twice():
    html = str(reason("<b>", ""))
    assert "<b>" not in html and "&amp;lt;" not in html
    assert 'data-reason-code="&lt;b&gt;"' in html

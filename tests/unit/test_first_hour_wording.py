"""The first hour's wording (issue 19, item 17): counts with their nouns in the right number,
and one webhook deadline in every document that names one — the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from console.kernel.wording import counted
from strategies.delivery.transport import TRY_DEADLINE_SECONDS

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_WORDS = re.compile(r"2xx within (\d+(?:\.\d+)?) ?s\b")


@pytest.mark.parametrize(
    ("n", "words", "expected"),
    [
        (0, ("problem",), "0 problems"),
        (1, ("problem",), "1 problem"),
        (2, ("problem",), "2 problems"),
        (1, ("entry", "entries"), "1 entry"),
        (3, ("entry", "entries"), "3 entries"),
    ],
)
def test_counted__noun_in_the_number_of_the_count(n, words, expected):
    assert counted(n, *words) == expected


def test_webhook_deadline__every_doc_says_the_transport_constant():
    texts = {
        path: path.read_text()
        for pattern in ("README.md", "docs/*.md", "sdk/README.md", "sdk/context_runtime/**/*.py")
        for path in ROOT.glob(pattern)
    }
    said = {
        str(path.relative_to(ROOT)): {float(n) for n in DEADLINE_WORDS.findall(text)}
        for path, text in texts.items()
        if DEADLINE_WORDS.search(text)
    }
    # The receiver's side (the SDK) and the contract both say it, and all say the same.
    assert {"sdk/context_runtime/webhook.py", "docs/runtime-contract.md"} <= set(said)
    assert {
        path: numbers for path, numbers in said.items() if numbers != {TRY_DEADLINE_SECONDS}
    } == {}
    for path in said:
        assert "TRY_DEADLINE_SECONDS" in texts[ROOT / path], path  # the constant is named


def test_messages_with_one_of_a_thing__singular_noun():
    from datetime import UTC, datetime

    from console.kernel.errors import ValidationFailed
    from strategies.exchange.services import config_read
    from traces.charts import chart_window, status_chart

    with pytest.raises(ValidationFailed) as refused:
        config_read([])  # one finding: the file must be an object
    assert "(1 problem)" in refused.value.message

    start, end, count = chart_window(datetime(2026, 3, 2, 12, tzinfo=UTC))
    buckets = [{} for _ in range(count)]
    buckets[0] = {"ready": 1}
    chart = status_chart("prod", buckets, start=start, end=end, marks=[], ticks=[], reasons=[])
    assert chart.summary.startswith("1 trace in prod in the last 7 days:")
    assert chart.buckets[0].title.endswith(": 1 trace — 1 ready")


def test_readme__opens_with_the_dashboard__links_the_trace_page__files_the_tests_save():
    readme = (ROOT / "README.md").read_text()
    shown = re.findall(r"\]\((docs/screenshots/[^)]+\.png)\)", readme)
    assert shown[:1] == ["docs/screenshots/dashboard-1366.png"]  # the first picture
    assert readme.index(shown[0]) < readme.index("\n## ")  # before the first section
    assert "docs/screenshots/trace-1366.png" in shown
    saver = (ROOT / "tests/functional/test_screenshots.py").read_text()
    for path in shown:
        assert (ROOT / path).stat().st_size > 10_000, path  # present, not a placeholder
        name = Path(path).stem.rsplit("-", 1)[0]
        assert f'"{name}"' in saver, f"{path} is not one test_screenshots.py saves"

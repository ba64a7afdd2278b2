"""The README's runtime is the example file, character for character: what a newcomer copies
is what the console's tests/integration/test_sdk_readme_runtime.py runs against a console."""

from __future__ import annotations

from pathlib import Path

SDK = Path(__file__).resolve().parent.parent
BEGIN = "<!-- sdk/examples/runtime.py: begin -->\n```python\n"
END = "```\n<!-- sdk/examples/runtime.py: end -->"


def readme_runtime() -> str:
    text = (SDK / "README.md").read_text()
    start = text.index(BEGIN) + len(BEGIN)
    return text[start : text.index(END, start)]


def test_readme__runtime_block__is_examples_runtime_py_verbatim():
    assert readme_runtime() == (SDK / "examples" / "runtime.py").read_text()

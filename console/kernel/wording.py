"""Counts in words: the one rule for "1 problem" / "2 problems" in Python messages (templates
use Django's ``pluralize`` filter for the same thing)."""

from __future__ import annotations

from django.utils.translation import ngettext


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` with its noun in the right number: ``counted(1, "problem")`` is "1 problem",
    ``counted(3, "entry", "entries")`` is "3 entries"."""
    return f"{n} {ngettext(singular, plural or f'{singular}s', n)}"


# How a release change reaches the runtimes (docs/runtime-contract.md: the config stream is
# the SDK's default transport; polling runtimes refetch on their interval, webhooks notify
# their targets): the one sentence the publish, promote and rollback pages and their
# confirmations say, so none of them promises only the slower path.
RUNTIMES_TAKE_IT = (
    "Runtimes connected to the config stream take it within a second; polling runtimes at "
    "their next poll."
)

"""Findings: what a validator, the trace ingest or the console's API says about input.

One type everywhere a place in some input is wrong: ``path`` (where), ``code`` (a machine word),
``message`` (a sentence a person understands) and ``severity``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ERROR",
    "FLAG",
    "Finding",
    "blocking",
]

ERROR = "error"
FLAG = "flag"


@dataclass(frozen=True)
class Finding:
    """One finding about a document body.

    ``severity`` is ``"error"`` for findings that block saving or publishing, ``"flag"`` for
    findings that only someone with the right capability may accept (sensitive sections).
    """

    path: str
    code: str
    message: str
    severity: str = ERROR

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "code": self.code,
            "message": self.message,
            "severity": self.severity,
        }


def blocking(errors: Iterable[Finding]) -> list[Finding]:
    """The findings that stop a save or publish (severity ``"error"``)."""
    return [e for e in errors if e.severity == ERROR]

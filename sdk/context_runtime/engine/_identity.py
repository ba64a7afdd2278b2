"""Which engine decided: the package version and a hash of the rules.

Two engines with the same rules give the same decisions for the same arguments, whatever
their version numbers, so a replay that does not reproduce a trace names both identities
(the runtime's, recorded in the trace, and the replaying one) and the reader can tell an
engine difference from a bad record at once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from context_runtime import __version__

# The modules whose code decides (docs/background.md § The budget allocator): the candidates'
# check, the strategy as the engine reads it, the estimators and the allocator. The wording of
# reasons is not a rule: changing a sentence leaves every decision and code as it was.
_RULE_MODULES = ("_candidates.py", "_estimators.py", "_strategy.py", "_selection.py")


def _rules_hash() -> str:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _RULE_MODULES:
        digest.update(name.encode())
        # Line endings normalised: a checkout on another platform has the same rules.
        digest.update((here / name).read_bytes().replace(b"\r\n", b"\n"))
    return digest.hexdigest()[:12]


RULES = _rules_hash()
ENGINE = f"context_runtime {__version__} rules {RULES}"

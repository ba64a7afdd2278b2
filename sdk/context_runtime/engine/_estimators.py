"""Token estimators: how the engine sizes an item that arrives without a size.

An estimator is anything with a ``name`` (it goes into the trace's
``input_estimate.estimator``) and an ``estimate(text) -> int`` method.  The default needs no
vocabulary file and downloads nothing; a runtime that has its model's tokenizer passes an
estimator built on it instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class Estimator(Protocol):
    """Estimates the tokens of a text.  Must be deterministic and return an ``int`` ≥ 0."""

    @property
    def name(self) -> str: ...

    def estimate(self, text: str) -> int: ...


@dataclass(frozen=True)
class CharacterEstimator:
    """``ceil(len(text) / chars_per_token)``: about right for English prose with the usual
    subword tokenizers at 4 characters a token, pessimistic enough for code and ids."""

    chars_per_token: int = 4

    def __post_init__(self):
        if not isinstance(self.chars_per_token, int) or self.chars_per_token < 1:
            raise ValueError(
                f"chars_per_token must be a whole number of at least 1, not "
                f"{self.chars_per_token!r}."
            )

    @property
    def name(self) -> str:
        return f"chars/{self.chars_per_token}"

    def estimate(self, text: str) -> int:
        return -(-len(text) // self.chars_per_token)


DEFAULT_ESTIMATOR = CharacterEstimator()

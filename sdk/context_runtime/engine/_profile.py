"""What the profile puts into each block: the context sections (docs/background.md § Context
sections)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from context_runtime.engine._errors import EngineInputError
from context_runtime.findings import Finding
from context_runtime.vocabulary import BLOCKS, KNOWN_SECTIONS


def context_sections(
    profile_body, *, section_order: Mapping[str, Sequence[str]] = KNOWN_SECTIONS
) -> dict[str, list[str]]:
    """The sections switched on in each block, in the order the runtime renders them.

    Returns ``{"user_context": [...], "query_context": [...]}`` (both blocks always present).
    A section is on only when its toggle is exactly ``true``; anything else leaves it off, so
    a malformed value never switches a (possibly sensitive) section on.  Sections come in
    ``section_order`` (the known sections' order unless the runtime gives its own), then any other
    enabled section in name order, so the result does not depend on how the stored JSON
    happened to order its keys.  Blocks this version does not know are ignored, as the
    contract asks of runtimes.

    Raises :class:`EngineInputError` when the body, its ``sections`` or a block is not an
    object.
    """
    if not isinstance(profile_body, Mapping):
        raise EngineInputError(
            [Finding("profile", "invalid_type", "A profile body must be an object.")]
        )
    sections = profile_body.get("sections")
    if not isinstance(sections, Mapping):
        raise EngineInputError(
            [
                Finding(
                    "profile.sections",
                    "invalid_type",
                    "profile.sections must be an object with the user_context and "
                    "query_context toggles.",
                )
            ]
        )
    result: dict[str, list[str]] = {}
    for block in BLOCKS:
        toggles = sections.get(block, {})
        if not isinstance(toggles, Mapping):
            raise EngineInputError(
                [
                    Finding(
                        f"profile.sections.{block}",
                        "invalid_type",
                        f"profile.sections.{block} must map section names to true or false.",
                    )
                ]
            )
        enabled = {key for key, value in toggles.items() if value is True}
        ordered = [key for key in section_order.get(block, ()) if key in enabled]
        ordered += sorted(enabled.difference(ordered))
        result[block] = ordered
    return result

"""The context profile validator (docs/runtime-contract.md §5, profile body): contextSections
toggles per block and the pipeline switches."""

from __future__ import annotations

from context_runtime._checks import (
    _check_document,
    _err,
    _index_of,
    _join,
    _kind,
    _name,
    _name_list,
    _show,
    _suggest,
    _unknown_fields,
    _unreadable,
)
from context_runtime.findings import FLAG, Finding
from context_runtime.manifest import Manifest
from context_runtime.vocabulary import (
    AGENT_WHITELIST_SWITCH,
    BLOCK_LABELS,
    BLOCKS,
    KNOWN_SECTIONS,
    KNOWN_SENSITIVE_SECTIONS,
    KNOWN_SWITCHES,
    PROFILE_FIELDS,
)


def validate_profile(
    body,
    manifest: Manifest | None = None,
    agent_keys: frozenset[str] | None = None,
    sensitive: frozenset[str] = frozenset(),
) -> list[Finding]:
    """Check a context profile body (contextSections toggles and pipeline switches).

    ``sensitive`` names sections to treat as sensitive besides those :func:`is_sensitive`
    knows (the console passes every section any environment's runtime declares sensitive).
    """
    findings = _check_document(body, "profile")
    if _unreadable(body, findings):
        return findings
    findings += _check_sections(body, manifest, sensitive)
    findings += _check_switches(body, manifest, agent_keys)
    findings += _unknown_fields(body, PROFILE_FIELDS, "", "a profile field", {})
    return findings


def sensitive_sections_enabled(
    body, manifest: Manifest | None = None, sensitive: frozenset[str] = frozenset()
) -> list[str]:
    """Keys of sensitive sections (see :func:`is_sensitive`) the profile switches on, in
    document order."""
    found: list[str] = []
    if not isinstance(body, dict) or not isinstance(body.get("sections"), dict):
        return found
    for block in BLOCKS:
        entries = body["sections"].get(block)
        if not isinstance(entries, dict):
            continue
        for key, value in entries.items():
            if value is True and is_sensitive(key, manifest, sensitive) and key not in found:
                found.append(key)
    return found


def is_sensitive(key, manifest: Manifest | None = None, sensitive=frozenset()) -> bool:
    """The one rule: a section is sensitive when it is known to be (the personal and
    state-of-mind sections of docs/background.md § Context sections), when the given manifest
    declares it so, or when it is in ``sensitive``. A manifest can add sensitive sections but
    never declassify one."""
    if not isinstance(key, str):
        return False
    if key in KNOWN_SENSITIVE_SECTIONS or key in sensitive:
        return True
    entry = manifest.sections.get(key) if manifest is not None else None
    return bool(entry and entry[1])


def _check_sections(body: dict, manifest: Manifest | None, sensitive) -> list[Finding]:
    if "sections" not in body:
        return [
            _err(
                "sections",
                "required",
                "sections is required: give the user_context and query_context toggles.",
            )
        ]
    sections = body["sections"]
    if not isinstance(sections, dict):
        return [
            _err(
                "sections",
                "invalid_type",
                "sections must be an object with the blocks user_context and query_context, "
                f"not {_kind(sections)}.",
            )
        ]
    findings: list[Finding] = []
    ordered = [b for b in BLOCKS if b in sections] + [b for b in sections if b not in BLOCKS]
    for block in ordered:
        entries = sections[block]
        block_path = _join("sections", block)
        if block not in BLOCKS:
            findings.append(
                _err(
                    block_path,
                    "unknown_block",
                    f"{_name(block)} is not a block; use user_context or query_context."
                    + _suggest(block, BLOCKS),
                )
            )
            continue
        if not isinstance(entries, dict):
            findings.append(
                _err(
                    block_path,
                    "invalid_type",
                    f"{block_path} must be an object mapping section names to true or false, "
                    f"not {_kind(entries)}.",
                )
            )
            continue
        for key, value in entries.items():
            here = _join(block_path, key)
            findings += _section_known(key, block, here, manifest)
            if not isinstance(value, bool):
                findings.append(
                    _err(here, "invalid_type", f"{here} must be true or false, not {_show(value)}.")
                )
            elif value and is_sensitive(key, manifest, sensitive):
                findings.append(
                    _err(
                        here,
                        "sensitive_section",
                        f"{key} is sensitive: only someone allowed to enable sensitive sections "
                        "can publish this.",
                        severity=FLAG,
                    )
                )
    return findings


def _section_known(key, block: str, here: str, manifest: Manifest | None) -> list:
    if manifest is not None:
        entry = manifest.sections.get(key) if isinstance(key, str) else None
        home = entry[0] if entry else None
        where = manifest.where
        candidates = list(manifest.sections)
    else:
        home = next((b for b in BLOCKS if key in KNOWN_SECTIONS[b]), None)
        where = "the known sections of document 000"
        candidates = [k for b in BLOCKS for k in KNOWN_SECTIONS[b]]
    if home is None:
        return [
            _err(
                here,
                "unknown_section",
                f"{_name(key)} is not a section in {where}.{_suggest(key, candidates)}",
            )
        ]
    if home != block:
        return [
            _err(
                here,
                "unknown_section",
                f"{key} belongs to the {BLOCK_LABELS.get(home, home)} block, not "
                f"{BLOCK_LABELS[block]}; move it to sections.{home}.",
            )
        ]
    return []


def _check_switches(
    body: dict, manifest: Manifest | None, agent_keys: frozenset[str] | None
) -> list[Finding]:
    if "switches" not in body:
        return []
    switches = body["switches"]
    if not isinstance(switches, dict):
        return [
            _err(
                "switches",
                "invalid_type",
                "switches must be an object mapping switch names to values, "
                f"not {_kind(switches)}.",
            )
        ]
    findings: list[Finding] = []
    for name, value in switches.items():
        here = _join("switches", name)
        if manifest is not None:
            if name not in manifest.switches:
                findings.append(
                    _err(
                        here,
                        "unknown_switch",
                        f"{_name(name)} is not a switch {manifest.where} understands."
                        + _suggest(name, manifest.switches),
                    )
                )
        elif name not in KNOWN_SWITCHES:
            findings.append(
                _err(
                    here,
                    "unknown_switch",
                    f"{_name(name)} is not a known switch." + _suggest(name, KNOWN_SWITCHES),
                )
            )
        spec = KNOWN_SWITCHES.get(name) if isinstance(name, str) else None
        findings += _switch_value(name, value, spec, here, agent_keys)
    return findings


def _switch_value(name, value, spec, here: str, agent_keys) -> list[Finding]:
    if spec is bool:
        if not isinstance(value, bool):
            return [
                _err(here, "invalid_type", f"{name} must be true or false, not {_show(value)}.")
            ]
        return []
    if isinstance(spec, tuple):
        choices = " or ".join(f'"{c}"' for c in spec)
        if not isinstance(value, str):
            return [_err(here, "invalid_type", f"{name} must be {choices}, not {_show(value)}.")]
        if value not in spec:
            return [_err(here, "invalid_choice", f"{name} must be {choices}, not {_show(value)}.")]
        return []
    if spec is list or isinstance(value, list):
        if not isinstance(value, list):
            return [
                _err(here, "invalid_type", f"{name} must be a list of names, not {_kind(value)}.")
            ]
        what = "an agent key" if name == AGENT_WHITELIST_SWITCH else "a name"
        findings, good = _name_list(
            {name: value}, name, name, required=False, path="switches", what=what
        )
        if name == AGENT_WHITELIST_SWITCH and agent_keys is not None:
            extra = {
                i: [
                    _err(
                        f"{here}[{i}]",
                        "invalid_reference",
                        f"{agent} in {name} is not a known agent.",
                    )
                ]
                for i, agent in good
                if agent not in agent_keys
            }
            combined = findings + [e for errors in extra.values() for e in errors]
            findings = sorted(combined, key=_index_of)
        return findings
    if not isinstance(value, bool | str):
        return [
            _err(
                here,
                "invalid_type",
                f"{_name(name)} must be true/false, text or a list of text, not {_kind(value)}.",
            )
        ]
    return []

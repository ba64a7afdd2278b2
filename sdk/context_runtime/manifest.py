"""What the runtime of one environment implements (docs/runtime-contract.md §2), and the
check of its wire form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from context_runtime._checks import _check_string_item, _err, _kind, _name_list, _show
from context_runtime.findings import Finding, blocking
from context_runtime.text import unstorable_strings
from context_runtime.vocabulary import BLOCKS

__all__ = [
    "FEATURES",
    "SHADOW",
    "SPLIT",
    "WATCH",
    "Manifest",
    "validate_manifest",
]

# What a runtime can do beyond serving the live configuration, declared in the manifest's
# ``features`` list (docs/runtime-contract.md §2). A manifest without the list declares none.
SHADOW = "shadow"  # runs the payload's ``shadow`` versions beside live and reports the result
# applies the payload's ``rollouts``: serves each request the version of its arm (the stable
# hash of context_runtime.rollouts) and runs the other arm's version as its shadow
SPLIT = "split"
# applies the ``rollouts`` entries of phase ``watch``: serves the live version and runs the
# previous one as shadow on the entry's share of units (the paired watch after a rollout)
WATCH = "watch"
# What this SDK implements, so what a runtime built on it declares (Registry.manifest_body).
FEATURES: tuple[str, ...] = (SHADOW, SPLIT, WATCH)


@dataclass(frozen=True)
class Manifest:
    """What the runtime of one environment implements (docs/runtime-contract.md §2)."""

    providers: frozenset[str]
    tools: frozenset[str]
    handlers: frozenset[str]
    sections: dict[str, tuple[str, bool]]  # section key -> (block, sensitive)
    switches: frozenset[str]
    name: str = ""
    # Names the runtime declares (``shadow``, ``split``); unknown names are kept, so a
    # newer runtime can declare what this SDK does not know yet.
    features: frozenset[str] = frozenset()

    @classmethod
    def from_dict(cls, data: dict, name: str = "") -> Manifest:
        """Build from the wire form; raise ``ValueError`` naming every problem if malformed."""
        problems = blocking(validate_manifest(data))
        if problems:
            raise ValueError("Invalid manifest: " + " ".join(p.message for p in problems))
        sections: dict[str, tuple[str, bool]] = {}
        for entry in data["sections"]:
            sections[entry["key"]] = (entry["block"], entry.get("sensitive", False))
        return cls(
            providers=frozenset(data["providers"]),
            tools=frozenset(data["tools"]),
            handlers=frozenset(data["handlers"]),
            sections=sections,
            switches=frozenset(data["switches"]),
            name=name,
            features=frozenset(data.get("features") or ()),
        )

    def to_dict(self) -> dict:
        """The wire form, with name lists sorted so equal manifests give equal dicts.
        ``features`` only when some are declared: a manifest from before the field gives the
        dict (and the console's content hash) it always gave."""
        wire = {
            "providers": sorted(self.providers),
            "tools": sorted(self.tools),
            "handlers": sorted(self.handlers),
            "sections": [
                {"key": key, "block": block, "sensitive": sensitive}
                for key, (block, sensitive) in self.sections.items()
            ],
            "switches": sorted(self.switches),
        }
        if self.features:
            wire["features"] = sorted(self.features)
        return wire

    def supports(self, feature: str) -> bool:
        """Whether the runtime declares ``feature`` (e.g. :data:`SHADOW`)."""
        return feature in self.features

    def __hash__(self) -> int:  # ``sections`` is a dict, so the generated hash would fail
        return hash(
            (
                self.providers,
                self.tools,
                self.handlers,
                frozenset(self.sections.items()),
                self.switches,
                self.name,
                self.features,
            )
        )

    @property
    def where(self) -> str:
        """How messages refer to this runtime: "the bank-uat runtime"."""
        return f"the {self.name} runtime" if self.name else "the target runtime"


# --------------------------------------------------------------------------- serialisation


def validate_manifest(data) -> list[Finding]:
    """Check the wire form of a manifest (docs/runtime-contract.md §2) as a runtime sends it.

    Unknown top-level fields are ignored: runtimes of other teams may report more than this
    console knows, and ``runtime`` is free text.
    """
    if not isinstance(data, dict):
        return [_err("", "invalid_type", f"A manifest must be a JSON object, not {_kind(data)}.")]
    text_findings = list(unstorable_strings(data, what="The manifest"))
    if text_findings:  # nothing else is read from a body that cannot be stored
        return text_findings
    findings: list[Finding] = []
    if "runtime" in data and not isinstance(data["runtime"], str):
        findings.append(
            _err("runtime", "invalid_type", f"runtime must be text, not {_show(data['runtime'])}.")
        )
    for field in ("providers", "tools", "handlers"):
        findings += _name_list(data, field, field, required=True)[0]
    findings += _manifest_sections(data)
    findings += _name_list(data, "switches", "switches", required=True)[0]
    findings += _name_list(data, "features", "features", required=False, what="a feature name")[0]
    return findings


def _manifest_sections(data: Mapping) -> list[Finding]:
    if "sections" not in data:
        return [_err("sections", "required", "sections is required: list the context sections.")]
    sections = data["sections"]
    if not isinstance(sections, list):
        return [
            _err("sections", "invalid_type", f"sections must be a list, not {_kind(sections)}.")
        ]
    findings: list[Finding] = []
    seen: set[str] = set()
    for i, entry in enumerate(sections):
        here = f"sections[{i}]"
        if not isinstance(entry, dict):
            findings.append(
                _err(
                    here,
                    "invalid_type",
                    f"{here} must be an object with key, block and sensitive, not {_kind(entry)}.",
                )
            )
            continue
        key = entry.get("key")
        problems = _check_string_item(key, f"{here}.key", "a section key")
        findings += problems
        if not problems:
            if key in seen:
                findings.append(
                    _err(f"{here}.key", "duplicate", f"Section {key} is listed twice; remove one.")
                )
            seen.add(key)
        block = entry.get("block")
        if block not in BLOCKS:
            findings.append(
                _err(
                    f"{here}.block",
                    "invalid_choice",
                    f"{here}.block must be user_context or query_context, not {_show(block)}.",
                )
            )
        if "sensitive" in entry and not isinstance(entry["sensitive"], bool):
            findings.append(
                _err(
                    f"{here}.sensitive",
                    "invalid_type",
                    f"{here}.sensitive must be true or false, not {_show(entry['sensitive'])}.",
                )
            )
    return findings

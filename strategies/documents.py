"""The one validator per document kind (RUNTIME_API §5), pure Python.

The editor, the API, publish and the import command all call these functions, so an ops
person sees the same finding wherever they are.  A finding names the exact place in the body
(``path``), a machine ``code`` and a sentence a person understands.  Structural checks always
run; checks against what a runtime implements run only when a :class:`Manifest` is given.

The validators never raise on JSON-like input: ``None``, lists, strings or nested garbage all
come back as findings.  Findings are ordered by where their path sits in the document: fields
in the order of the RUNTIME_API §5 table, unknown fields after them, items of a list by index.

No Django imports here: the runtime SDK and the selection engine use this module too.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

STRATEGY = "strategy"
PROFILE = "profile"
KINDS = (STRATEGY, PROFILE)

MAX_BODY_BYTES = 64 * 1024

ERROR = "error"
FLAG = "flag"

USER_CONTEXT = "user_context"
QUERY_CONTEXT = "query_context"
BLOCKS = (USER_CONTEXT, QUERY_CONTEXT)
BLOCK_LABELS = {USER_CONTEXT: "user context", QUERY_CONTEXT: "query context"}

# Document 000 §4: the contextSections of assistant_professional, in the table's order.
KNOWN_SECTIONS: dict[str, tuple[str, ...]] = {
    USER_CONTEXT: (
        "high_level_profile",
        "communication_style",
        "real_time_update_from_chat",
        "chat_messages_memories",
        "memory_retention",
        "user_emails",
        "personal_particulars",
        "state_of_mind",
        "dynamic_context",
        "explicit_memories",
    ),
    QUERY_CONTEXT: (
        "time_summary",
        "chat_topic",
        "predicted_query_memory",
        "detailed_profile",
        "fact_memory",
        "truth",
        "contact_list",
        "personal_particulars_details",
        "state_of_mind_schedule",
    ),
}

# Sections about a person's identity or mental state.  Used when no manifest says otherwise,
# so that switching one on is never waved through just because a runtime has not reported yet.
KNOWN_SENSITIVE_SECTIONS = frozenset(
    {
        "user_emails",
        "personal_particulars",
        "personal_particulars_details",
        "state_of_mind",
        "state_of_mind_schedule",
    }
)

# Pipeline switches of document 000 and the value each takes: ``bool``, ``list`` (of strings)
# or a tuple of allowed strings.
KNOWN_SWITCHES: dict[str, object] = {
    "temporalAnchor.enabled": bool,
    "temporalAnchor.agentWhitelist": list,
    "toolPrefilter.enabled": bool,
    "queryRelatedContextInjectorMode": ("default", "persistent_injection"),
    "enableQueryRelatedContext": bool,
    "historyCompression.enabled": bool,
}
AGENT_WHITELIST_SWITCH = "temporalAnchor.agentWhitelist"

# Top-level fields in the order of the RUNTIME_API §5 tables; findings follow this order.
STRATEGY_FIELDS = (
    "required",
    "optional",
    "priority",
    "bundles",
    "depends_on",
    "allowed_tools",
    "on_missing",
    "max_extra_reads",
    "budget",
    "history",
    "snapshot",
)
PROFILE_FIELDS = ("sections", "switches")
BUDGET_FIELDS = ("max_input_tokens", "reserve_output_tokens")
HISTORY_FIELDS = ("max_turns", "compress_after_tokens")
SNAPSHOT_FIELDS = ("allowed",)

MAX_INPUT_TOKENS = 2_000_000
MAX_EXTRA_READS = 10
MAX_PRIORITY = 100
MAX_HISTORY_TURNS = 200

# Document 003 wrote the fallback for a missing order as a top-level field.
LEGACY_ON_MISSING_ORDER = "on_missing_order"
LEGACY_ORDER_SOURCE = "order_delivery"

# Document 000 §4, the Bank column, with the Bank UAT pipeline switches.
BANK_PROFILE: dict = {
    "sections": {
        USER_CONTEXT: {
            "high_level_profile": True,
            "communication_style": True,
            "real_time_update_from_chat": True,
            "chat_messages_memories": True,
            "memory_retention": True,
            "user_emails": False,
            "personal_particulars": False,
            "state_of_mind": False,
            "dynamic_context": False,
            "explicit_memories": False,
        },
        QUERY_CONTEXT: {
            "time_summary": True,
            "chat_topic": True,
            "predicted_query_memory": True,
            "detailed_profile": True,
            "fact_memory": True,
            "truth": True,
            "contact_list": True,
            "personal_particulars_details": False,
            "state_of_mind_schedule": False,
        },
    },
    "switches": {
        "temporalAnchor.enabled": False,
        "temporalAnchor.agentWhitelist": [],
        "toolPrefilter.enabled": False,
        "queryRelatedContextInjectorMode": "default",
        "enableQueryRelatedContext": True,
        "historyCompression.enabled": True,
    },
}

# A manifest in the wire form of RUNTIME_API §2 that implements everything the demo uses.
DEMO_MANIFEST: dict = {
    "providers": [
        "task_state",
        "order_delivery",
        "applicable_policy",
        "recent_dialogue",
        "memory",
        "knowledge",
    ],
    "tools": ["lookup_order", "search_policy"],
    "handlers": ["general_policy_only"],
    "sections": [
        {"key": key, "block": block, "sensitive": key in KNOWN_SENSITIVE_SECTIONS}
        for block in BLOCKS
        for key in KNOWN_SECTIONS[block]
    ],
    "switches": list(KNOWN_SWITCHES),
}


@dataclass(frozen=True)
class ValidationError:
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


@dataclass(frozen=True)
class Manifest:
    """What the runtime of one environment implements (RUNTIME_API §2)."""

    providers: frozenset[str]
    tools: frozenset[str]
    handlers: frozenset[str]
    sections: dict[str, tuple[str, bool]]  # section key -> (block, sensitive)
    switches: frozenset[str]
    name: str = ""

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
        )

    def to_dict(self) -> dict:
        """The wire form, with name lists sorted so equal manifests give equal dicts."""
        return {
            "providers": sorted(self.providers),
            "tools": sorted(self.tools),
            "handlers": sorted(self.handlers),
            "sections": [
                {"key": key, "block": block, "sensitive": sensitive}
                for key, (block, sensitive) in self.sections.items()
            ],
            "switches": sorted(self.switches),
        }

    def __hash__(self) -> int:  # ``sections`` is a dict, so the generated hash would fail
        return hash(
            (
                self.providers,
                self.tools,
                self.handlers,
                frozenset(self.sections.items()),
                self.switches,
                self.name,
            )
        )

    @property
    def where(self) -> str:
        """How messages refer to this runtime: "the bank-uat runtime"."""
        return f"the {self.name} runtime" if self.name else "the target runtime"


# --------------------------------------------------------------------------- serialisation


def canonical_json(body) -> bytes:
    """The body as bytes that are equal exactly when the documents are equal."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def content_hash(body) -> str:
    """sha256 hex of :func:`canonical_json`: the version's content hash."""
    return hashlib.sha256(canonical_json(body)).hexdigest()


def normalize_legacy_strategy(body: dict) -> dict:
    """Turn document 003's spelling into the contract's, returning a new dict.

    Document 003 writes ``"on_missing_order": X``; the contract writes
    ``"on_missing": {"order_delivery": X}``.  Its ``name`` and ``version`` belong to the
    console's document and version records, not to the body, so they are dropped.  When
    ``on_missing`` already gives ``order_delivery`` a different handler the legacy field is
    kept, so the validator points at the contradiction instead of one value silently winning.
    """
    if not isinstance(body, dict):
        return copy.deepcopy(body)
    result = copy.deepcopy(body)
    result.pop("name", None)
    result.pop("version", None)
    if LEGACY_ON_MISSING_ORDER not in result:
        return result
    handler = result[LEGACY_ON_MISSING_ORDER]
    on_missing = result.get("on_missing", {})
    if not isinstance(on_missing, dict):
        return result
    if LEGACY_ORDER_SOURCE in on_missing and on_missing[LEGACY_ORDER_SOURCE] != handler:
        return result
    del result[LEGACY_ON_MISSING_ORDER]
    result["on_missing"] = {**on_missing, LEGACY_ORDER_SOURCE: handler}
    return result


# --------------------------------------------------------------------------- public checks


def blocking(errors: Iterable[ValidationError]) -> list[ValidationError]:
    """The findings that stop a save or publish (severity ``"error"``)."""
    return [e for e in errors if e.severity == ERROR]


def sensitive_sections_enabled(body: dict, manifest: Manifest | None) -> list[str]:
    """Keys of sensitive sections the profile switches on, in document order.

    Sensitivity comes from the manifest; without one, from :data:`KNOWN_SENSITIVE_SECTIONS`.
    """
    found: list[str] = []
    if not isinstance(body, dict) or not isinstance(body.get("sections"), dict):
        return found
    for block in BLOCKS:
        entries = body["sections"].get(block)
        if not isinstance(entries, dict):
            continue
        for key, value in entries.items():
            if value is True and _is_sensitive(key, manifest) and key not in found:
                found.append(key)
    return found


def validate_document(
    kind: str, body, manifest: Manifest | None = None, **kw
) -> list[ValidationError]:
    """Dispatch to the validator of ``kind``; ``agent_keys`` is used by profiles only."""
    if kind == STRATEGY:
        kw.pop("agent_keys", None)
        return validate_strategy(body, manifest, **kw)
    if kind == PROFILE:
        return validate_profile(body, manifest, **kw)
    raise ValueError(f"Unknown document kind {kind!r}; expected one of {', '.join(KINDS)}.")


def validate_strategy(body, manifest: Manifest | None = None) -> list[ValidationError]:
    """Check a strategy body; with a manifest, also that the runtime implements it."""
    findings = _check_document(body, "strategy")
    if not isinstance(body, dict):
        return findings
    v = _StrategyCheck(body, manifest)
    for field in STRATEGY_FIELDS:
        getattr(v, f"check_{field}")()
    findings += v.findings
    findings += _unknown_fields(body, STRATEGY_FIELDS, "", "a strategy field", _STRATEGY_HINTS)
    return findings


def validate_profile(
    body, manifest: Manifest | None = None, agent_keys: frozenset[str] | None = None
) -> list[ValidationError]:
    """Check a context profile body (contextSections toggles and pipeline switches)."""
    findings = _check_document(body, "profile")
    if not isinstance(body, dict):
        return findings
    findings += _check_sections(body, manifest)
    findings += _check_switches(body, manifest, agent_keys)
    findings += _unknown_fields(body, PROFILE_FIELDS, "", "a profile field", {})
    return findings


def validate_manifest(data) -> list[ValidationError]:
    """Check the wire form of a manifest (RUNTIME_API §2) as a runtime sends it.

    Unknown top-level fields are ignored: runtimes of other teams may report more than this
    console knows, and ``runtime`` is free text.
    """
    if not isinstance(data, dict):
        return [_err("", "invalid_type", f"A manifest must be a JSON object, not {_kind(data)}.")]
    findings: list[ValidationError] = []
    if "runtime" in data and not isinstance(data["runtime"], str):
        findings.append(
            _err("runtime", "invalid_type", f"runtime must be text, not {_show(data['runtime'])}.")
        )
    for field in ("providers", "tools", "handlers"):
        findings += _name_list(data, field, field, required=True)[0]
    findings += _manifest_sections(data)
    findings += _name_list(data, "switches", "switches", required=True)[0]
    return findings


# --------------------------------------------------------------------------- helpers


def _err(path: str, code: str, message: str, severity: str = ERROR) -> ValidationError:
    return ValidationError(path=path, code=code, message=message, severity=severity)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value) -> str:
    """A value's JSON type in words, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _show(value, limit: int = 60) -> str:
    """A value as JSON for a message, shortened; never raises."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        text = _kind(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _name(key, limit: int = 80) -> str:
    """A key or name as it should read in a sentence (no quotes)."""
    text = key if isinstance(key, str) else _show(key)
    if text == "":
        return '""'
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _join(path: str, key) -> str:
    key = key if isinstance(key, str) else _show(key)
    return f"{path}.{key}" if path else key


def _is_sensitive(key, manifest: Manifest | None) -> bool:
    if manifest is None:
        return key in KNOWN_SENSITIVE_SECTIONS
    entry = manifest.sections.get(key) if isinstance(key, str) else None
    return bool(entry and entry[1])


def _suggest(key, choices: Iterable[str]) -> str:
    if not isinstance(key, str):
        return ""
    match = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {match[0]}?" if match else ""


def _check_document(body, what: str) -> list[ValidationError]:
    """Size and shape of the whole body."""
    findings: list[ValidationError] = []
    try:
        size = len(canonical_json(body))
    except (TypeError, ValueError, RecursionError):
        return [
            _err("", "invalid_type", f"The {what} contains values that cannot be written as JSON.")
        ]
    if size > MAX_BODY_BYTES:
        findings.append(
            _err(
                "",
                "too_large",
                f"The {what} is {size:,} bytes; the limit is {MAX_BODY_BYTES:,} bytes.",
            )
        )
    if not isinstance(body, dict):
        findings.append(
            _err("", "invalid_type", f"A {what} must be a JSON object, not {_kind(body)}.")
        )
    return findings


_STRATEGY_HINTS = {
    LEGACY_ON_MISSING_ORDER: (
        "on_missing_order is document 003's old spelling; write "
        '"on_missing": {"order_delivery": …} instead (and keep only one of them).'
    ),
    "name": (
        "name is not part of a strategy body; the console keeps the strategy's key itself, "
        "so remove it."
    ),
    "version": (
        "version is not part of a strategy body; the console numbers versions itself, so remove it."
    ),
}


def _unknown_fields(
    obj: Mapping, known: tuple[str, ...], path: str, what: str, hints: Mapping[str, str]
) -> list[ValidationError]:
    findings = []
    for key in obj:
        if key in known:
            continue
        message = hints.get(key) if isinstance(key, str) else None
        if message is None:
            message = f"{_name(key)} is not {what}.{_suggest(key, known)}"
        findings.append(_err(_join(path, key), "unknown_field", message))
    return findings


def _check_int(value, path: str, low: int, high: int | None = None) -> list[ValidationError]:
    if not _is_int(value):
        return [_err(path, "invalid_type", f"{path} must be a whole number, not {_show(value)}.")]
    if value < low or (high is not None and value > high):
        bounds = f"between {low:,} and {high:,}" if high is not None else f"at least {low:,}"
        return [_err(path, "out_of_range", f"{path} must be {bounds}, not {value:,}.")]
    return []


def _check_string_item(value, path: str, what: str) -> list[ValidationError]:
    if not isinstance(value, str):
        return [_err(path, "invalid_type", f"{path} must be {what} (text), not {_show(value)}.")]
    if not value.strip():
        return [_err(path, "empty", f"{path} is empty; write {what} there or remove it.")]
    return []


def _name_list(
    obj: Mapping, field: str, label: str, *, required: bool, path: str = "", what: str = "a name"
) -> tuple[list[ValidationError], list[tuple[int, str]]]:
    """Check ``obj[field]`` is a list of distinct non-empty strings.

    Returns the findings and the usable items as (index, value), duplicates excluded.
    """
    here = _join(path, field)
    if field not in obj:
        if required:
            return [_err(here, "required", f"{here} is missing; list the {label}.")], []
        return [], []
    items = obj[field]
    if not isinstance(items, list):
        return [
            _err(
                here,
                "invalid_type",
                f"{here} must be a list, each entry {what}; not {_kind(items)}.",
            )
        ], []
    findings: list[ValidationError] = []
    good: list[tuple[int, str]] = []
    first_at: dict[str, int] = {}
    for i, item in enumerate(items):
        item_path = f"{here}[{i}]"
        problems = _check_string_item(item, item_path, what)
        if problems:
            findings += problems
            continue
        if item in first_at:
            findings.append(
                _err(
                    item_path,
                    "duplicate",
                    f"{_name(item)} is listed twice in {label} "
                    f"(first at {here}[{first_at[item]}]); remove one.",
                )
            )
            continue
        first_at[item] = i
        good.append((i, item))
    return findings, good


def _manifest_sections(data: Mapping) -> list[ValidationError]:
    if "sections" not in data:
        return [_err("sections", "required", "sections is required: list the context sections.")]
    sections = data["sections"]
    if not isinstance(sections, list):
        return [
            _err("sections", "invalid_type", f"sections must be a list, not {_kind(sections)}.")
        ]
    findings: list[ValidationError] = []
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


# --------------------------------------------------------------------------- strategy


class _StrategyCheck:
    """The field checks of one strategy body; each appends findings in path order."""

    def __init__(self, body: dict, manifest: Manifest | None):
        self.body = body
        self.manifest = manifest
        self.findings: list[ValidationError] = []
        self.required_errors, self.required = _name_list(
            body, "required", "required sources", required=True, what="a source key"
        )
        self.optional_errors, self.optional = _name_list(
            body, "optional", "optional sources", required=False, what="a source key"
        )
        self.sources = {s for _, s in self.required} | {s for _, s in self.optional}
        # References to sources can only be judged when the source lists are readable;
        # otherwise every reference would be reported as unknown, burying the real problem.
        self.references_checkable = isinstance(body.get("required"), list) and isinstance(
            body.get("optional", []), list
        )

    def _undeclared(self, source) -> bool:
        return self.references_checkable and source not in self.sources

    def _map(self, field: str, what: str) -> dict | None:
        if field not in self.body:
            return None
        value = self.body[field]
        if not isinstance(value, dict):
            self.findings.append(
                _err(field, "invalid_type", f"{field} must be an object mapping {what}.")
            )
            return None
        return value

    def _provider_check(self, items: list[tuple[int, str]], field: str) -> dict[int, list]:
        if self.manifest is None:
            return {}
        return {
            i: [
                _err(
                    f"{field}[{i}]",
                    "unknown_source",
                    f"{source} has no provider in {self.manifest.where}.",
                )
            ]
            for i, source in items
            if source not in self.manifest.providers
        }

    def _merge_by_index(self, structural, extra: dict[int, list]) -> None:
        """Interleave manifest findings with structural ones so indexes stay in order."""
        combined = list(structural)
        for items in extra.values():
            combined += items
        self.findings += sorted(combined, key=_index_of)

    def check_required(self) -> None:
        self._merge_by_index(self.required_errors, self._provider_check(self.required, "required"))

    def check_optional(self) -> None:
        findings = list(self.optional_errors)
        required = {s for _, s in self.required}
        for i, source in self.optional:
            if source in required:
                findings.append(
                    _err(
                        f"optional[{i}]",
                        "overlap",
                        f"{source} is both required and optional; a source must be one or "
                        "the other.",
                    )
                )
        self._merge_by_index(findings, self._provider_check(self.optional, "optional"))

    def check_priority(self) -> None:
        priority = self._map("priority", "sources to a priority between 0 and 100")
        for source, value in (priority or {}).items():
            here = _join("priority", source)
            if self._undeclared(source):
                self.findings.append(
                    _err(
                        here,
                        "invalid_reference",
                        f"priority names {_name(source)}, which is not a required or optional "
                        "source of this strategy.",
                    )
                )
            self.findings += _check_int(value, here, 0, MAX_PRIORITY)

    def check_bundles(self) -> None:
        bundles = self._map("bundles", "bundle names to lists of item-id prefixes or source keys")
        for name, items in (bundles or {}).items():
            here = _join("bundles", name)
            if isinstance(name, str) and not name.strip():
                self.findings.append(_err(here, "empty", "A bundle needs a name."))
            if isinstance(items, list) and not items:
                self.findings.append(
                    _err(
                        here,
                        "empty",
                        f"Bundle {_name(name)} is empty; list at least one item-id prefix or "
                        "source key.",
                    )
                )
                continue
            self.findings += _name_list(
                bundles,
                name,
                f"bundle {_name(name)}",
                required=False,
                path="bundles",
                what="an item-id prefix or source key",
            )[0]

    def check_depends_on(self) -> None:
        depends_on = self._map("depends_on", "each source to the sources it needs")
        if depends_on is None:
            return
        graph: dict[str, list[str]] = {}
        for source in depends_on:
            here = _join("depends_on", source)
            if self._undeclared(source):
                self.findings.append(
                    _err(
                        here,
                        "not_declared",
                        f"depends_on names {_name(source)}, which is not a required or optional "
                        "source of this strategy.",
                    )
                )
            errors, good = _name_list(
                depends_on,
                source,
                f"what {_name(source)} depends on",
                required=False,
                path="depends_on",
                what="a source key",
            )
            extra: dict[int, list] = {}
            for i, need in good:
                if need == source:
                    extra.setdefault(i, []).append(
                        _err(f"{here}[{i}]", "cycle", f"{need} cannot depend on itself.")
                    )
                elif self._undeclared(need):
                    extra.setdefault(i, []).append(
                        _err(
                            f"{here}[{i}]",
                            "not_declared",
                            f"{_name(source)} depends on {need}, which is not a required or "
                            "optional source of this strategy.",
                        )
                    )
                if isinstance(source, str) and need != source:
                    graph.setdefault(source, []).append(need)
            self._merge_by_index(errors, extra)
        for cycle in _cycles(graph):
            self.findings.append(
                _err(
                    _join("depends_on", cycle[0]),
                    "cycle",
                    "depends_on goes round in a circle: "
                    + " → ".join(cycle + [cycle[0]])
                    + "; none of these could ever be selected.",
                )
            )

    def check_allowed_tools(self) -> None:
        errors, good = _name_list(
            self.body, "allowed_tools", "allowed tools", required=False, what="a tool name"
        )
        extra = {}
        if self.manifest is not None:
            extra = {
                i: [
                    _err(
                        f"allowed_tools[{i}]",
                        "unknown_tool",
                        f"{tool} is not a tool of {self.manifest.where}.",
                    )
                ]
                for i, tool in good
                if tool not in self.manifest.tools
            }
        self._merge_by_index(errors, extra)

    def check_on_missing(self) -> None:
        on_missing = self._map("on_missing", "sources to the handler used when they are missing")
        for source, handler in (on_missing or {}).items():
            here = _join("on_missing", source)
            if self._undeclared(source):
                self.findings.append(
                    _err(
                        here,
                        "not_declared",
                        f"on_missing names {_name(source)}, which is not a required or optional "
                        "source of this strategy.",
                    )
                )
            problems = _check_string_item(handler, here, "a handler name")
            self.findings += problems
            if not problems and self.manifest is not None and handler not in self.manifest.handlers:
                self.findings.append(
                    _err(
                        here,
                        "unknown_handler",
                        f"{handler} (used when {_name(source)} is missing) is not a handler "
                        f"of {self.manifest.where}.",
                    )
                )

    def check_max_extra_reads(self) -> None:
        if "max_extra_reads" in self.body:
            self.findings += _check_int(
                self.body["max_extra_reads"], "max_extra_reads", 0, MAX_EXTRA_READS
            )

    def _object(self, field: str) -> dict | None:
        value = self.body[field]
        if not isinstance(value, dict):
            self.findings.append(
                _err(field, "invalid_type", f"{field} must be an object, not {_kind(value)}.")
            )
            return None
        return value

    def check_budget(self) -> None:
        if "budget" not in self.body:
            self.findings.append(
                _err(
                    "budget",
                    "required",
                    'budget is required: give at least {"max_input_tokens": …}.',
                )
            )
            return
        budget = self._object("budget")
        if budget is None:
            return
        if "max_input_tokens" in budget:
            maximum = budget["max_input_tokens"]
            self.findings += _check_int(maximum, "budget.max_input_tokens", 1, MAX_INPUT_TOKENS)
        else:
            maximum = None
            self.findings.append(
                _err(
                    "budget.max_input_tokens",
                    "required",
                    "budget.max_input_tokens is required: the most input tokens a request may use.",
                )
            )
        if "reserve_output_tokens" in budget:
            reserve = budget["reserve_output_tokens"]
            problems = _check_int(reserve, "budget.reserve_output_tokens", 0)
            self.findings += problems
            if not problems and _is_int(maximum) and reserve >= maximum:
                self.findings.append(
                    _err(
                        "budget.reserve_output_tokens",
                        "out_of_range",
                        f"budget.reserve_output_tokens ({reserve:,}) must be less than "
                        f"budget.max_input_tokens ({maximum:,}), or no room is left for input.",
                    )
                )
        self.findings += _unknown_fields(budget, BUDGET_FIELDS, "budget", "a budget field", {})

    def check_history(self) -> None:
        if "history" not in self.body:
            return
        history = self._object("history")
        if history is None:
            return
        if "max_turns" in history:
            self.findings += _check_int(
                history["max_turns"], "history.max_turns", 0, MAX_HISTORY_TURNS
            )
        if "compress_after_tokens" in history:
            self.findings += _check_int(
                history["compress_after_tokens"], "history.compress_after_tokens", 0
            )
        self.findings += _unknown_fields(history, HISTORY_FIELDS, "history", "a history field", {})

    def check_snapshot(self) -> None:
        if "snapshot" not in self.body:
            return
        snapshot = self._object("snapshot")
        if snapshot is None:
            return
        if "allowed" not in snapshot:
            self.findings.append(
                _err(
                    "snapshot.allowed",
                    "required",
                    "snapshot.allowed is required: true if runtimes may send the full request.",
                )
            )
        elif not isinstance(snapshot["allowed"], bool):
            self.findings.append(
                _err(
                    "snapshot.allowed",
                    "invalid_type",
                    f"snapshot.allowed must be true or false, not {_show(snapshot['allowed'])}.",
                )
            )
        self.findings += _unknown_fields(
            snapshot, SNAPSHOT_FIELDS, "snapshot", "a snapshot field", {}
        )


def _index_of(finding: ValidationError) -> tuple[int, ...]:
    """Sort key: the list indexes in a path, so ``x[2]`` comes before ``x[10]``."""
    indexes = []
    for part in finding.path.split("[")[1:]:
        number = part.split("]", 1)[0]
        indexes.append(int(number) if number.isdigit() else -1)
    return tuple(indexes)


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of sources, in a stable order."""
    order = list(graph)
    for needs in graph.values():
        order += [n for n in needs if n not in order]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative Tarjan, so a long chain cannot exhaust the recursion limit.
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(graph.get(succ, ()))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)

    for node in order:
        if node not in index:
            visit(node)

    cycles = []
    for group in groups:
        members = set(group)
        start = min(group, key=order.index)
        # Shortest way back to the start inside the group.
        previous: dict[str, str] = {}
        frontier = [start]
        found = None
        while frontier and found is None:
            following = []
            for node in frontier:
                for succ in graph.get(node, ()):
                    if succ not in members:
                        continue
                    if succ == start:
                        found = node
                        break
                    if succ not in previous:
                        previous[succ] = node
                        following.append(succ)
                if found is not None:
                    break
            frontier = following
        path = [found]
        while path[-1] != start:
            path.append(previous[path[-1]])
        cycles.append(list(reversed(path)))
    return sorted(cycles, key=lambda c: order.index(c[0]))


# --------------------------------------------------------------------------- profile


def _check_sections(body: dict, manifest: Manifest | None) -> list[ValidationError]:
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
    findings: list[ValidationError] = []
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
            elif value and _is_sensitive(key, manifest):
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
) -> list[ValidationError]:
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
    findings: list[ValidationError] = []
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


def _switch_value(name, value, spec, here: str, agent_keys) -> list[ValidationError]:
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

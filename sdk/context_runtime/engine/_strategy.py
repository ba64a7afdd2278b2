"""A strategy body (RUNTIME_API §5) read once into the form the engine selects with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from context_runtime.documents import normalize_legacy_strategy, validate_strategy
from context_runtime.engine._errors import EngineInputError
from context_runtime.findings import Finding, blocking
from context_runtime.vocabulary import LEGACY_ON_MISSING_ORDER

# Sources without an entry in ``priority`` rank with priority 0, after every source given one.
DEFAULT_PRIORITY = 0
_MAX_WIRE_LABEL = 100  # a trace's source and bundle fields


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """The parts of a strategy body the engine uses, plus what it derives from them once.

    Build it with :meth:`from_body` when the runtime reads its configuration (once per
    config ETag) and pass it to every :func:`~context_runtime.engine.select` call; passing
    the body itself works too, but validates it again on every call.

    ``required_sources`` is ``required`` followed by every source a required source depends
    on, directly or not (``depends_on``): a required item cannot be used without what it
    depends on, so that is required as well.
    """

    required: tuple[str, ...]
    max_input_tokens: int
    reserve_output_tokens: int = 0
    optional: tuple[str, ...] = ()
    priority: Mapping[str, int] = field(default_factory=dict)
    bundles: tuple[tuple[str, tuple[str, ...]], ...] = ()
    depends_on: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    on_missing: Mapping[str, str] = field(default_factory=dict)

    sources: frozenset[str] = field(init=False, repr=False, compare=False)
    required_sources: tuple[str, ...] = field(init=False, repr=False, compare=False)
    required_set: frozenset[str] = field(init=False, repr=False, compare=False)
    rank: Mapping[str, int] = field(init=False, repr=False, compare=False)
    bundle_entries: tuple[str, ...] = field(init=False, repr=False, compare=False)
    # What decides who belongs with whom (bundles, what is required): two strategies with an
    # equal key group the same candidates alike (engine._selection._Run reuses it). Text, so
    # its hash is computed once per strategy, not per selection as a tuple's would be.
    grouping_key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        put = object.__setattr__
        put(self, "required", tuple(self.required))
        put(self, "optional", tuple(self.optional))
        put(self, "priority", MappingProxyType(dict(self.priority)))
        # By name: a stored JSON object need not keep its keys' order.
        put(self, "bundles", tuple(sorted((name, tuple(e)) for name, e in self.bundles)))
        put(
            self,
            "depends_on",
            MappingProxyType({s: tuple(needs) for s, needs in self.depends_on.items()}),
        )
        put(self, "on_missing", MappingProxyType(dict(self.on_missing)))
        put(self, "sources", frozenset(self.required) | frozenset(self.optional))
        closure = list(self.required)
        for source in closure:  # grows while it is read: a breadth-first walk
            for need in self.depends_on.get(source, ()):
                if need not in closure:
                    closure.append(need)
        put(self, "required_sources", tuple(closure))
        put(self, "required_set", frozenset(closure))
        put(self, "rank", MappingProxyType({source: i for i, source in enumerate(closure)}))
        put(self, "bundle_entries", tuple(e for _, entries in self.bundles for e in entries))
        put(
            self,
            "grouping_key",
            repr((self.bundles, self.required_sources, tuple(sorted(self.depends_on.items())))),
        )

    @classmethod
    def from_body(cls, body) -> Strategy:
        """Read a strategy body; raise :class:`EngineInputError` when it is not valid.

        The console's validator does the checking (without a manifest: whether each source
        has a provider is the console's check at publish time).  As RUNTIME_API §5 asks of
        runtimes, fields this version does not know are ignored, so a newer console can add
        some; the chapter's ``on_missing_order`` (docs/background.md § Strategies per task) is
        read as ``on_missing.order_delivery``.
        """
        if isinstance(body, dict):
            body = normalize_legacy_strategy(body)
        findings = [
            _under_strategy(f)
            for f in blocking(validate_strategy(body))
            if f.code != "unknown_field" or f.path == LEGACY_ON_MISSING_ORDER
        ]
        if not findings:
            findings = _wire_limits(body)
        if findings:
            raise EngineInputError(findings)
        budget = body["budget"]
        return cls(
            required=body["required"],
            optional=body.get("optional", ()),
            priority=body.get("priority", {}),
            bundles=tuple(body.get("bundles", {}).items()),
            depends_on=body.get("depends_on", {}),
            on_missing=body.get("on_missing", {}),
            max_input_tokens=budget["max_input_tokens"],
            reserve_output_tokens=budget.get("reserve_output_tokens", 0),
        )

    def priority_of(self, source: str) -> int:
        return self.priority.get(source, DEFAULT_PRIORITY)

    def bundles_for(self, item_id: str, source: str) -> tuple[str, ...]:
        """Every bundle that lists the item's source or a prefix of its id, by name."""
        entries = self.bundle_entries
        if source not in entries and not item_id.startswith(entries):
            return ()  # the usual case, in two C-level checks
        return tuple(
            name
            for name, entries in self.bundles
            if source in entries or item_id.startswith(entries)
        )

    def __hash__(self) -> int:
        return hash(
            (
                self.required,
                self.optional,
                self.max_input_tokens,
                self.reserve_output_tokens,
                tuple(sorted(self.priority.items())),
                self.bundles,
                tuple(sorted(self.depends_on.items())),
                tuple(sorted(self.on_missing.items())),
            )
        )


def _under_strategy(finding: Finding) -> Finding:
    path = f"strategy.{finding.path}" if finding.path else "strategy"
    return Finding(path, finding.code, finding.message, finding.severity)


def _wire_limits(body: dict) -> list[Finding]:
    """Names that must fit a trace's fields, so every decision can be reported as it is."""
    findings = []
    for field_name in ("required", "optional"):
        for i, source in enumerate(body.get(field_name, ())):
            if len(source) > _MAX_WIRE_LABEL:
                findings.append(
                    Finding(
                        f"strategy.{field_name}[{i}]",
                        "too_long",
                        f"The source key {source[:40]}… is {len(source)} characters; a trace "
                        f"holds at most {_MAX_WIRE_LABEL}.",
                    )
                )
    for name in body.get("bundles", {}):
        if len(name) > _MAX_WIRE_LABEL:
            findings.append(
                Finding(
                    f"strategy.bundles.{name[:40]}…",
                    "too_long",
                    f"The bundle name {name[:40]}… is {len(name)} characters; a trace holds at "
                    f"most {_MAX_WIRE_LABEL}.",
                )
            )
    return findings

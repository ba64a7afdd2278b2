"""The strategy validator (docs/runtime-contract.md §5, strategy body)."""

from __future__ import annotations

import copy
import graphlib

from context_runtime._checks import (
    _check_document,
    _check_int,
    _check_string_item,
    _err,
    _index_of,
    _is_int,
    _join,
    _kind,
    _name,
    _name_list,
    _show,
    _unknown_fields,
    _unreadable,
)
from context_runtime.findings import Finding
from context_runtime.manifest import Manifest
from context_runtime.vocabulary import (
    BUDGET_FIELDS,
    HISTORY_FIELDS,
    LEGACY_ON_MISSING_ORDER,
    LEGACY_ORDER_SOURCE,
    MAX_EXTRA_READS,
    MAX_HISTORY_TURNS,
    MAX_INPUT_TOKENS,
    MAX_PRIORITY,
    SNAPSHOT_FIELDS,
    STRATEGY_FIELDS,
)


def validate_strategy(body, manifest: Manifest | None = None) -> list[Finding]:
    """Check a strategy body; with a manifest, also that the runtime implements it."""
    findings = _check_document(body, "strategy")
    if _unreadable(body, findings):
        return findings
    v = _StrategyCheck(body, manifest)
    for field in STRATEGY_FIELDS:
        getattr(v, f"check_{field}")()
    findings += v.findings
    findings += _unknown_fields(body, STRATEGY_FIELDS, "", "a strategy field", _STRATEGY_HINTS)
    return findings


def normalize_legacy_strategy(body: dict) -> dict:
    """Turn the chapter's spelling into the contract's, returning a new dict.

    The example of docs/background.md § Strategies per task writes ``"on_missing_order": X``;
    the contract writes ``"on_missing": {"order_delivery": X}``. Its ``name`` and ``version``
    belong to the console's document and version records, not to the body, so they are dropped.
    When ``on_missing`` already gives ``order_delivery`` a different handler the legacy field is
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


class _StrategyCheck:
    """The field checks of one strategy body; each appends findings in path order."""

    def __init__(self, body: dict, manifest: Manifest | None):
        self.body = body
        self.manifest = manifest
        self.findings: list[Finding] = []
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


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """One cycle per group of sources that depend on each other in a circle, in the order
    the sources first appear. ``graphlib`` finds a cycle; its members are then set aside so
    the next search finds the next independent one."""
    order = list(graph)
    for needs in graph.values():
        order += [n for n in needs if n not in order]
    remaining = {node: [n for n in needs if n in graph] for node, needs in graph.items()}
    cycles = []
    while True:
        try:
            graphlib.TopologicalSorter(remaining).prepare()
        except graphlib.CycleError as error:
            # graphlib lists each node before the ones that need it; read it as "a needs b".
            members = list(reversed(error.args[1][:-1]))  # it repeats the first node at the end
            first = min(range(len(members)), key=lambda i: order.index(members[i]))
            cycle = members[first:] + members[:first]
            cycles.append(cycle)
            for node in members:
                remaining.pop(node, None)
            remaining = {n: [d for d in ds if d in remaining] for n, ds in remaining.items()}
            continue
        break
    return sorted(cycles, key=lambda c: order.index(c[0]))

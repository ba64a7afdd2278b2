"""What a provider hands the engine (:class:`CandidateItem`), what the engine says about each
one (:class:`ItemDecision`), and the check that refuses malformed candidates."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from context_runtime import wire
from context_runtime.findings import Finding

# The provider's outcome for one item: not fetched, no access, not applicable
# (docs/background.md § Tracing without copying private data).
FETCHED = "fetched"
NOT_FETCHED = "not_fetched"
NO_ACCESS = "no_access"
NOT_APPLICABLE = "not_applicable"
OUTCOMES = (FETCHED, NOT_FETCHED, NO_ACCESS, NOT_APPLICABLE)

# The limits of the trace's candidate fields, so that every decision goes onto the wire as is.
MAX_ID_CHARS = 300
MAX_LABEL_CHARS = 100  # version, bundle
MAX_SIZE = 2**31 - 1


class CandidateItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item a provider returned for this request.

    - ``id``: the item's id (``"order:A1042"``, ``"P7-v2#terms"``); unique among the
      candidates, except that several versions of one id from one source may come together
      (at most one of them may claim to apply, see ``outcome``).
    - ``source``: the source key, one of the strategy's ``required`` or ``optional`` sources.
    - ``version``: the version the provider read (``"r12"``, ``"v2"``).
    - ``size``: its size in tokens; when ``None`` the estimator sizes ``text``.
    - ``text``: the content, for the assembler (and the estimator when ``size`` is ``None``).
    - ``relevance``: a score from 0 to 1 from a retriever or relevance model, or ``None``.
    - ``bundle``: an indivisible group the provider knows of, besides the strategy's
      bundles that match the item (bundles sharing an item are chosen together).
    - ``depends_on``: ids of items this one is only usable with.
    - ``conflicts_with``: ids of items the provider knows contradict this one.
    - ``outcome``: ``fetched`` (valid and claims to apply), ``not_fetched`` (the provider
      failed: timeout, error), ``no_access`` (the principal may not see it, or the permission
      check could not say), ``not_applicable`` (it exists but does not apply here, e.g. a
      policy version not in effect on the order date).
    - ``note``: a few words from the provider shown in the reason (``"order service timed
      out after 2,000 ms"``, ``"older product introduction"``).
    """

    id: str
    source: str
    version: str = ""
    size: int | None = None
    text: str | None = None
    relevance: float | None = None
    bundle: str | None = None
    depends_on: tuple[str, ...] = ()
    conflicts_with: tuple[str, ...] = ()
    outcome: str = FETCHED
    note: str = ""


class ItemDecision(msgspec.Struct, frozen=True, gc=False):
    """The engine's decision about one candidate, with the reason an operator reads.

    ``decision`` is one of :data:`context_runtime.wire.DECISIONS` and ``reason_code`` one of
    :data:`context_runtime.wire.REASON_CODES` (what reports group by); ``required`` says whether the
    item was required content for this request (its source is required, it belongs to a
    bundle holding required items, or a required item depends on it) — an item that does not
    apply is never required.
    """

    id: str
    source: str
    version: str
    size: int | None
    required: bool
    bundle: str | None
    decision: str
    reason: str
    reason_code: str

    def to_wire(self) -> wire.Candidate:
        """This decision as the trace's candidate struct (RUNTIME_API §3)."""
        return wire.Candidate(
            id=self.id,
            source=self.source,
            decision=self.decision,
            version=self.version,
            size=self.size,
            required=self.required,
            bundle=self.bundle,
            reason=self.reason,
            reason_code=self.reason_code,
        )


class CheckedCandidates(msgspec.Struct, kw_only=True, dict=True):
    """What :func:`check_candidates` learnt on its one pass, for the selection to reuse.

    ``dict=True``: the selection also keeps here, as ``grouping``, who belongs with whom
    under a strategy's bundles, required sources and source dependencies
    (``engine._selection._Run``): a function of these candidates and those three alone, so a
    second version that shares them — a shadow, a replay's other version — reuses it. Kept
    out of the fields: it is not part of what the check found (equality, encoding)."""

    sizes: list  # int per fetched item; int or None for the others
    first_index: dict  # id -> index of its first candidate
    versions: dict  # id -> indexes of all its candidates, for ids that come more than once
    present_sources: set  # sources with at least one candidate that is not ``not_applicable``
    has_item_bundles: bool
    has_dependencies: bool
    has_conflict_flags: bool

    def indexes(self, item_id: str) -> Sequence[int]:
        """Every candidate with this id (several when versions come together)."""
        many = self.versions.get(item_id)
        if many is not None:
            return many
        one = self.first_index.get(item_id)
        return () if one is None else (one,)


def _show(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_candidates(
    items: Sequence, sources: frozenset[str], estimator, findings: list[Finding]
) -> CheckedCandidates:
    """Check every candidate, appending a finding per problem, and size each one.

    One pass, no early exit, so a caller learns about every bad item at once.  The findings
    name the item (``candidates[3].size``: "the size of P7-v2 is -5 tokens ...").  A
    well-formed item passes one combined test; only a failing one is looked at field by field.
    """
    sizes: list = [None] * len(items)
    first_index: dict[str, int] = {}
    versions: dict[str, list[int]] = {}
    present: set[str] = set()
    has_item_bundles = has_dependencies = has_conflict_flags = False
    add = findings.append
    add_present = present.add
    claim = first_index.setdefault

    for i, c in enumerate(items):
        if type(c) is not CandidateItem and not isinstance(c, CandidateItem):
            add(
                Finding(
                    f"candidates[{i}]",
                    "invalid_type",
                    f"candidates[{i}] must be a CandidateItem, not {type(c).__name__}.",
                )
            )
            continue
        cid = c.id
        size = c.size
        relevance = c.relevance
        outcome = c.outcome
        if not (
            type(cid) is str
            and 0 < len(cid) <= MAX_ID_CHARS
            and c.source in sources
            and outcome in OUTCOMES
            and (size is None or (type(size) is int and 0 <= size <= MAX_SIZE))
            and (relevance is None or (type(relevance) in _NUMBERS and 0 <= relevance <= 1))
            and type(c.version) is str
            and len(c.version) <= MAX_LABEL_CHARS
            and type(c.note) is str
        ):
            if not _check_fields(i, c, sources, add):
                continue  # without a usable id nothing else can be said about it
            if size is not None and not (type(size) is int and 0 <= size <= MAX_SIZE):
                size = -1  # reported above; nothing to estimate
        if outcome != NOT_APPLICABLE:
            add_present(c.source)
        if size is None:
            text = c.text
            if text is not None:
                size = _estimate(estimator, text, cid, f"candidates[{i}]", add)
            elif outcome == FETCHED:
                add(
                    Finding(
                        f"candidates[{i}].size",
                        "missing_size",
                        f"{cid} was fetched but has neither a size nor a text to estimate one "
                        "from.",
                    )
                )
        sizes[i] = size

        if c.bundle is not None:
            has_item_bundles = True
            _check_bundle(i, c, add)
        if c.depends_on:
            has_dependencies = True
            _check_references(c.depends_on, cid, f"candidates[{i}].depends_on", "depends_on", add)
            if cid in c.depends_on:
                add(
                    Finding(
                        f"candidates[{i}].depends_on",
                        "dependency_cycle",
                        f"{cid} depends on itself, so it could never be selected.",
                    )
                )
        if c.conflicts_with:
            has_conflict_flags = True
            here = f"candidates[{i}].conflicts_with"
            _check_references(c.conflicts_with, cid, here, "conflicts_with", add)
            if cid in c.conflicts_with:
                add(
                    Finding(
                        here,
                        "invalid_reference",
                        f"{cid} names its own id in conflicts_with; versions of one id that "
                        "both claim to apply conflict without a flag.",
                    )
                )
        first = claim(cid, i)
        if first != i:
            _check_repeat(items, i, first, versions, add)

    if has_conflict_flags:
        _check_conflict_targets(items, first_index, add)
    if has_dependencies:
        _check_dependency_cycles(items, first_index, add)
    return CheckedCandidates(
        sizes=sizes,
        first_index=first_index,
        versions=versions,
        present_sources=present,
        has_item_bundles=has_item_bundles,
        has_dependencies=has_dependencies,
        has_conflict_flags=has_conflict_flags,
    )


_NUMBERS = (float, int)


def _check_fields(i: int, c: CandidateItem, sources, add) -> bool:
    """The field-by-field check of an item that failed the combined test; ``False`` when its
    id is unusable."""
    here = f"candidates[{i}]"
    cid = c.id
    if type(cid) is not str or not cid or len(cid) > MAX_ID_CHARS:
        add(
            Finding(
                f"{here}.id",
                "invalid_id",
                f"{here} has the id {_show(cid)}; an id is text of 1 to {MAX_ID_CHARS} characters.",
            )
        )
        return False
    if c.source not in sources:
        add(
            Finding(
                f"{here}.source",
                "unknown_source",
                f"{cid} comes from {_show(c.source)}, which is not a required or optional "
                "source of this strategy.",
            )
        )
    if c.outcome not in OUTCOMES:
        add(
            Finding(
                f"{here}.outcome",
                "invalid_choice",
                f"{cid} has the outcome {_show(c.outcome)}; use one of {', '.join(OUTCOMES)}.",
            )
        )
    size = c.size
    if size is None:
        pass
    elif type(size) is not int:
        add(
            Finding(
                f"{here}.size",
                "invalid_type",
                f"The size of {cid} must be a whole number of tokens, not {_show(size)}.",
            )
        )
    elif size < 0:
        add(
            Finding(
                f"{here}.size",
                "negative_size",
                f"The size of {cid} is {size:,} tokens; a size is 0 or more.",
            )
        )
    elif size > MAX_SIZE:
        add(
            Finding(
                f"{here}.size",
                "out_of_range",
                f"The size of {cid} is {size:,} tokens, more than the {MAX_SIZE:,} a trace "
                "can hold.",
            )
        )
    relevance = c.relevance
    if relevance is not None and (
        type(relevance) not in _NUMBERS or not 0 <= relevance <= 1  # NaN fails too
    ):
        add(
            Finding(
                f"{here}.relevance",
                "out_of_range",
                f"The relevance of {cid} must be a number from 0 to 1, not {_show(relevance)}.",
            )
        )
    version = c.version
    if type(version) is not str or len(version) > MAX_LABEL_CHARS:
        add(
            Finding(
                f"{here}.version",
                "invalid_version",
                f"The version of {cid} must be text of at most {MAX_LABEL_CHARS} characters, "
                f"not {_show(version)}.",
            )
        )
    if type(c.note) is not str:
        add(
            Finding(
                f"{here}.note",
                "invalid_type",
                f"The note of {cid} must be text, not {_show(c.note)}.",
            )
        )
    return True


def _check_bundle(i: int, c: CandidateItem, add) -> None:
    bundle = c.bundle
    if type(bundle) is not str or not bundle.strip() or len(bundle) > MAX_LABEL_CHARS:
        add(
            Finding(
                f"candidates[{i}].bundle",
                "invalid_bundle",
                f"The bundle of {c.id} must be a name of 1 to {MAX_LABEL_CHARS} characters, "
                f"not {_show(bundle)}.",
            )
        )


def _estimate(estimator, text, cid: str, here: str, add) -> int | None:
    if type(text) is not str:
        add(
            Finding(
                f"{here}.text",
                "invalid_type",
                f"The text of {cid} must be a string, not {type(text).__name__}.",
            )
        )
        return None
    size = estimator.estimate(text)
    if type(size) is not int or size < 0:
        add(
            Finding(
                f"{here}.text",
                "invalid_estimate",
                f"The estimator {estimator.name} gave {_show(size)} for the text of {cid}; "
                "an estimate is a whole number of tokens, 0 or more.",
            )
        )
        return None
    return size


def _check_references(refs, cid: str, here: str, field: str, add) -> None:
    if type(refs) is tuple and len(refs) == 1 and type(refs[0]) is str and refs[0]:
        return  # the usual case
    if not isinstance(refs, tuple | list) or not all(type(r) is str and r for r in refs):
        add(
            Finding(
                here,
                "invalid_type",
                f"{field} of {cid} must be a tuple of item ids, not {_show(refs)}.",
            )
        )


def _check_repeat(items, i: int, first: int, versions: dict, add) -> None:
    """A second candidate with an id already seen: allowed only as another version of the same
    source's item (the engine then decides which applies, or reports the conflict)."""
    c = items[i]
    here = f"candidates[{i}].id"
    earlier = items[first]
    if earlier.source != c.source:
        add(
            Finding(
                here,
                "duplicate_id",
                f"{c.id} is the id of candidates[{first}] from {earlier.source} as well as of "
                f"this item from {c.source}; an id names one item.",
            )
        )
        return
    same = versions.setdefault(c.id, [first])
    for j in same:
        if items[j].version == c.version:
            shown = f"{c.id} {c.version}" if c.version else c.id
            add(
                Finding(
                    here,
                    "duplicate_id",
                    f"{shown} comes twice (candidates[{j}] and candidates[{i}]); send each "
                    "item once.",
                )
            )
            return
    same.append(i)


def _check_conflict_targets(items, first_index: dict, add) -> None:
    for i, c in enumerate(items):
        if not isinstance(c, CandidateItem) or not isinstance(c.conflicts_with, tuple | list):
            continue
        for k, target in enumerate(c.conflicts_with):
            if type(target) is str and target not in first_index:
                add(
                    Finding(
                        f"candidates[{i}].conflicts_with[{k}]",
                        "unknown_reference",
                        f"{c.id} is flagged as conflicting with {_show(target)}, which is not "
                        "among the candidates; send both sides of a conflict.",
                    )
                )


def _check_dependency_cycles(items, first_index: dict, add) -> None:
    """Item-level dependencies that go round in a circle (ids; versions share one node).

    A depth-first walk in the candidates' order, so the same input always reports the same
    circles, each starting at its earliest item."""
    graph: dict[str, list[str]] = {}
    for c in items:
        if not isinstance(c, CandidateItem) or not isinstance(c.depends_on, tuple | list):
            continue
        if not c.depends_on:
            continue
        needs = graph.setdefault(c.id, [])
        for need in c.depends_on:
            if type(need) is str and need in first_index and need != c.id and need not in needs:
                needs.append(need)
    done: set[str] = set()
    seen_circles: set[frozenset] = set()
    for start in graph:
        if start in done:
            continue
        path = [start]
        on_path = {start}
        stack = [iter(graph[start])]
        while stack:
            for need in stack[-1]:
                if need in on_path:
                    circle = path[path.index(need) :]
                    if frozenset(circle) not in seen_circles:
                        seen_circles.add(frozenset(circle))
                        add(_circle_finding(circle, first_index))
                elif need not in done and graph.get(need):
                    path.append(need)
                    on_path.add(need)
                    stack.append(iter(graph[need]))
                    break
            else:
                stack.pop()
                node = path.pop()
                on_path.discard(node)
                done.add(node)


def _circle_finding(circle: list[str], first_index: dict) -> Finding:
    start = min(range(len(circle)), key=lambda k: first_index[circle[k]])
    circle = circle[start:] + circle[:start]
    return Finding(
        f"candidates[{first_index[circle[0]]}].depends_on",
        "dependency_cycle",
        f"{' → '.join([*circle, circle[0]])}: these items depend on each other in a circle, so "
        "none of them could be selected.",
    )

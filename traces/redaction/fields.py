"""Every string a runtime can send, in one place: the wire structs' string fields, each with
what redaction may do to it (docs/data-protection.md "Fields covered").

- TEXT: free text (a reason, a note, a model name, an input error's message). A rule that
  REDACTS rewrites it: the match becomes `[redacted:<rule>]`.
- IDENTIFIER: what the console and the runtime refer to each other by (a request id, an
  agent, a source, an item id, a principal, a document key). Rewriting one would break what
  refers to it (a replay, a rollout's unit, an erasure), so personal data found there refuses
  the item, whatever the rule's action: send an internal reference instead.
- SNAPSHOT: the final request, any JSON: each of its strings (keys too) is TEXT, before it is
  encrypted.

`wire_string_paths` reads the same paths off the structs themselves
(`msgspec.inspect`); tests/unit/test_data_protection_fields.py fails when a string field is
added to the wire without being listed here, so none can be forgotten.
"""

from __future__ import annotations

import msgspec

TEXT, IDENTIFIER, SNAPSHOT = "text", "identifier", "snapshot"

# Paths: `a.b` a nested struct's field, `[]` each item of a list, `{}` each key of a map.
TRACE_FIELDS: dict[str, str] = {
    "request_id": IDENTIFIER,
    "agent": IDENTIFIER,
    "environment": IDENTIFIER,
    "documents{}": IDENTIFIER,
    "strategy": IDENTIFIER,
    "principal": IDENTIFIER,
    "task.id": IDENTIFIER,
    "model.name": TEXT,
    "model.adapter": TEXT,
    "degradation": IDENTIFIER,
    "input_estimate.unit": TEXT,
    "input_estimate.estimator": TEXT,
    "sources[].id": IDENTIFIER,
    "sources[].version": TEXT,
    "candidates[].id": IDENTIFIER,
    "candidates[].source": IDENTIFIER,
    "candidates[].version": TEXT,
    "candidates[].bundle": IDENTIFIER,
    "candidates[].reason": TEXT,
    "candidates[].depends_on[]": IDENTIFIER,
    "candidates[].conflicts_with[]": IDENTIFIER,
    "candidates[].note": TEXT,
    "candidates[].provider_bundle": IDENTIFIER,
    "shadow.selected[]": IDENTIFIER,
    "shadow.degradation": IDENTIFIER,
    "shadow.sources_not_fetched[]": IDENTIFIER,
    "rollout.id": IDENTIFIER,
    "rollout.arm": IDENTIFIER,
    "otel.trace_id": IDENTIFIER,
    "otel.span_id": IDENTIFIER,
    "selection.engine": TEXT,
    "input_errors[].path": TEXT,
    "input_errors[].code": TEXT,
    "input_errors[].message": TEXT,
    "input_errors[].source": IDENTIFIER,
    "input_errors[].item": IDENTIFIER,
    "sections.user_context[]": IDENTIFIER,
    "sections.query_context[]": IDENTIFIER,
    "snapshot": SNAPSHOT,
}

# An outcome's label must be one the environment declared: like an identifier, never rewritten.
OUTCOME_FIELDS: dict[str, str] = {
    "request_id": IDENTIFIER,
    "kind": IDENTIFIER,
    "value": IDENTIFIER,
    "agent": IDENTIFIER,
}


def wire_string_paths(struct_type) -> set[str]:
    """Every path of a string (or raw JSON) a struct decodes, read off its type: closed lists
    (Literal) are not free text and are left out."""
    paths: set[str] = set()

    def visit(t, path: str) -> None:
        if isinstance(t, msgspec.inspect.Metadata):
            visit(t.type, path)
        elif isinstance(t, msgspec.inspect.StrType | msgspec.inspect.RawType):
            paths.add(path)
        elif isinstance(t, msgspec.inspect.UnionType):
            for member in t.types:
                visit(member, path)
        elif isinstance(
            t, msgspec.inspect.ListType | msgspec.inspect.VarTupleType | msgspec.inspect.SetType
        ):
            visit(t.item_type, path + "[]")
        elif isinstance(t, msgspec.inspect.DictType):
            visit(t.key_type, path + "{}")
            visit(t.value_type, path + "{}=")
        elif isinstance(t, msgspec.inspect.StructType):
            for f in t.fields:
                visit(f.type, f"{path}.{f.name}" if path else f.name)
        elif isinstance(t, msgspec.inspect.AnyType):
            paths.add(path + "(any)")

    visit(msgspec.inspect.type_info(struct_type), "")
    return paths


def tree(fields: dict[str, str]) -> dict:
    """The flat paths as a nested walk plan: {name: kind | {sub…}}; `[]` and `{}` nest too."""
    root: dict = {}
    for path, kind in fields.items():
        parts = path.replace("[]", ".[]").replace("{}", ".{}").split(".")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = kind
    return root


TRACE_TREE = tree(TRACE_FIELDS)
OUTCOME_TREE = tree(OUTCOME_FIELDS)

"""SCIM 2.0 filters and PATCH paths (RFC 7644 §3.4.2.2, §3.5.2), read for
console.accounts.scim: a `filter=` query parameter becomes a Django Q over the SCIM models
(parsed by scim2-filter-parser, then walked here against a closed map of attributes), and a
PATCH operation's `path` becomes (extension, attribute, value filter, sub-attribute).

Anything this does not understand is a ScimFilterError, never a 500: the API answers it 400
with scimType invalidFilter (a filter) or invalidPath (a path)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import Q
from scim2_filter_parser import ast
from scim2_filter_parser.lexer import SCIMLexer
from scim2_filter_parser.parser import SCIMParser

FILTER_MAX = 1000
CORE_URNS = (
    "urn:ietf:params:scim:schemas:core:2.0:user",
    "urn:ietf:params:scim:schemas:core:2.0:group",
)


class ScimFilterError(Exception):
    """A filter or a path the console cannot read: its message says why, in plain words."""


@dataclass(frozen=True)
class Attr:
    """How a SCIM attribute is searched: its Django lookup, and its kind — `text`
    (case-insensitive, as userName and displayName are in RFC 7643), `exact` (externalId,
    case-exact), `bool` (active), `id` (the resource's id: an integer)."""

    field: str
    kind: str = "text"


USER_ATTRS = {
    "id": Attr("pk", "id"),
    "username": Attr("user_name"),
    "externalid": Attr("external_id", "exact"),
    "active": Attr("active", "bool"),
    "displayname": Attr("attributes__displayName"),
    "name.givenname": Attr("attributes__name__givenName"),
    "name.familyname": Attr("attributes__name__familyName"),
    "emails": Attr("emails"),
    "emails.value": Attr("emails"),
}
GROUP_ATTRS = {
    "id": Attr("pk", "id"),
    "displayname": Attr("display_name"),
    "externalid": Attr("external_id", "exact"),
    "members": Attr("members__pk", "id"),
    "members.value": Attr("members__pk", "id"),
}
_TEXT_LOOKUPS = {
    "eq": "iexact",
    "co": "icontains",
    "sw": "istartswith",
    "ew": "iendswith",
    "gt": "gt",
    "ge": "gte",
    "lt": "lt",
    "le": "lte",
}
_EXACT_LOOKUPS = {**_TEXT_LOOKUPS, "eq": "exact", "co": "contains", "sw": "startswith"}
_EXACT_LOOKUPS["ew"] = "endswith"


def _parse(text: str):
    if not isinstance(text, str) or not text.strip():
        raise ScimFilterError("The filter is empty.")
    if len(text) > FILTER_MAX:
        raise ScimFilterError(f"The filter is longer than {FILTER_MAX} characters.")
    try:
        return SCIMParser().parse(SCIMLexer().tokenize(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises several kinds; each is a bad filter
        raise ScimFilterError(f"The filter cannot be read: {exc}") from None


def _attr_name(path: ast.AttrPath) -> str:
    if not isinstance(path.attr_name, str):
        raise ScimFilterError("Filters inside brackets are not supported here.")
    uri = (path.uri or "").lower()
    if uri and uri not in CORE_URNS:
        raise ScimFilterError(f"The console cannot filter on attributes of {path.uri}.")
    name = path.attr_name.lower()
    sub = getattr(path, "sub_attr", None)
    return f"{name}.{sub.value.lower()}" if sub is not None else name


def _comparison(node: ast.AttrExpr, attrs: dict[str, Attr]) -> Q:
    name = _attr_name(node.attr_path)
    attr = attrs.get(name)
    if attr is None:
        known = ", ".join(sorted(attrs))
        raise ScimFilterError(f"The console cannot filter on {name!r}; it can on: {known}.")
    op = node.value.lower()
    value = getattr(node.comp_value, "value", None)
    if op == "pr":
        if attr.kind in ("id", "bool"):
            return Q(pk__isnull=False)
        if attr.field == "emails":
            return Q(attributes__emails__0__isnull=False)
        return ~Q(**{attr.field: ""}) & Q(**{f"{attr.field}__isnull": False})
    if value is None:
        raise ScimFilterError(f"{op} needs a value.")
    if attr.kind == "bool":
        if op not in ("eq", "ne") or value.lower() not in ("true", "false"):
            raise ScimFilterError("active compares with eq or ne to true or false.")
        q = Q(**{attr.field: value.lower() == "true"})
        return ~q if op == "ne" else q
    if attr.kind == "id":
        if op not in ("eq", "ne"):
            raise ScimFilterError("An id compares with eq or ne.")
        q = Q(**{attr.field: int(value)}) if value.isdigit() and len(value) < 18 else Q(pk__in=[])
        return ~q if op == "ne" else q
    if attr.field == "emails":  # any of the person's e-mail addresses
        if op != "eq":
            raise ScimFilterError("emails compares with eq.")
        return Q(attributes__emails__contains=[{"value": value}])
    lookups = _EXACT_LOOKUPS if attr.kind == "exact" else _TEXT_LOOKUPS
    if op == "ne":
        return ~Q(**{f"{attr.field}__{lookups['eq']}": value})
    if op not in lookups:
        raise ScimFilterError(f"Unknown operator {op!r}.")
    return Q(**{f"{attr.field}__{lookups[op]}": value})


def _walk(node, attrs: dict[str, Attr]) -> Q:
    if isinstance(node, ast.Filter):
        if getattr(node, "namespace", None) is not None:
            raise ScimFilterError("Filters inside brackets are not supported here.")
        q = _walk(node.expr, attrs)
        return ~q if node.negated else q
    if isinstance(node, ast.LogExpr):
        left, right = _walk(node.expr1, attrs), _walk(node.expr2, attrs)
        return left & right if node.op.lower() == "and" else left | right
    if isinstance(node, ast.AttrExpr):
        return _comparison(node, attrs)
    raise ScimFilterError("The filter cannot be read.")


def filter_q(text: str, attrs: dict[str, Attr]) -> Q:
    """The Q a SCIM filter means over USER_ATTRS or GROUP_ATTRS; ScimFilterError if none."""
    return _walk(_parse(text), attrs)


# --- PATCH paths ---------------------------------------------------------------------------------
_PATH = re.compile(
    r"(?:(?P<urn>urn:[^\[\]\s]+):)?(?P<attr>[A-Za-z][\w$-]*)"
    r"(?:\[(?P<filter>[^\]]*)\])?(?:\.(?P<sub>[A-Za-z][\w$-]*))?"
)
_VALUE_FILTER = re.compile(r'\s*(?P<attr>[A-Za-z][\w$-]*)\s+eq\s+"(?P<value>[^"]*)"\s*', re.I)


@dataclass(frozen=True)
class Path:
    """A PATCH path: `attr`, `attr.sub`, `attr[key eq "v"]`, `attr[key eq "v"].sub`, each
    possibly prefixed with a schema URN (an extension's attributes live under it)."""

    attr: str
    urn: str | None = None
    where: tuple[str, str] | None = None  # (key, value) of `[key eq "value"]`
    sub: str | None = None


def path_parse(text) -> Path:
    if not isinstance(text, str) or len(text) > 500:
        raise ScimFilterError("The path is not a string of at most 500 characters.")
    found = _PATH.fullmatch(text.strip())
    if found is None:
        raise ScimFilterError(f"The path {text!r} cannot be read.")
    urn = found["urn"]
    if urn and urn.lower() in CORE_URNS:
        urn = None
    where = None
    if found["filter"] is not None:
        inner = _VALUE_FILTER.fullmatch(found["filter"])
        if inner is None:
            raise ScimFilterError(f'In {text!r}: only [attribute eq "value"] is supported.')
        where = (inner["attr"], inner["value"])
    return Path(attr=found["attr"], urn=urn, where=where, sub=found["sub"])

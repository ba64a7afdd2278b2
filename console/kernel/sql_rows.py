"""Model instances from SQL written out, built as the ORM builds them.

For the few reads on every page where the ORM's own work — compiling a query of many columns
and joins, then the rows — took several times the statement's cost (docs/PERFORMANCE.md,
issue 36): the statement lists a model's columns (`columns`) and each row's slice becomes an
instance (`built`), every value through its field's converters (a JSON column arrives as
text), exactly as a queryset would give it.
"""

from __future__ import annotations

from functools import cache

from django.db import DEFAULT_DB_ALIAS, connection


@cache
def _fields(model) -> tuple:
    return tuple(model._meta.concrete_fields)


def columns(model, alias: str) -> str:
    """`alias.column, …` of the model's concrete fields, in the order `built` reads them."""
    return ", ".join(f"{alias}.{connection.ops.quote_name(f.column)}" for f in _fields(model))


def width(model) -> int:
    """How many values of a row `columns(model, …)` gives."""
    return len(_fields(model))


@cache
def _converters(model) -> tuple:
    table = model._meta.db_table
    out = []
    for field in _fields(model):
        column = field.get_col(table)
        found = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        out.append((column, tuple(found)))
    return tuple(out)


def built(model, values, *, db: str = DEFAULT_DB_ALIAS):
    """An instance of `model` from the values of `columns(model, …)`, as read from the
    database `db` (not new: saving it updates its row)."""
    converted = []
    for value, (column, converters) in zip(values, _converters(model), strict=True):
        for converter in converters:
            value = converter(value, column, connection)
        converted.append(value)
    return model.from_db(db, [f.attname for f in _fields(model)], converted)

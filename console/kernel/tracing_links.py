"""TRACE_LINK_URL_TEMPLATE: a link from a trace to the users' tracing system. One place for
its placeholders, read by the settings (is the template usable?) and by the trace page (the
link of one trace, or why it has none). Pure: the settings import it before Django is set up.

- ``{request_id}``: the console's request id (every trace has one; the SDK's assembly span
  carries it as ``context_console.request_id``).
- ``{trace_id}``, ``{span_id}``: the OpenTelemetry trace and span id the runtime recorded
  (the trace's ``otel`` block: W3C ids, what a tracing system opens a trace by).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

PLACEHOLDERS = ("request_id", "trace_id", "span_id")


def template_problem(template: str) -> str | None:
    """What makes ``template`` unusable (in words that finish "TRACE_LINK_URL_TEMPLATE …"),
    or None."""
    if not template.startswith(("https://", "http://")):
        return "must be an http(s) URL"
    if not any("{" + name + "}" in template for name in PLACEHOLDERS):
        named = ", ".join("{" + name + "}" for name in PLACEHOLDERS)
        return f"must contain at least one of {named}"
    return None


def placeholders_used(template: str) -> tuple[str, ...]:
    return tuple(name for name in PLACEHOLDERS if "{" + name + "}" in template)


def fill(template: str, values: Mapping[str, str | None]) -> tuple[str | None, tuple[str, ...]]:
    """The link with each placeholder replaced by its value (URL-encoded), and the
    placeholders the template uses that have no value. A link is made only when none is
    missing: a link with a hole would open the wrong thing or nothing."""
    used = placeholders_used(template)
    missing = tuple(name for name in used if not values.get(name))
    if missing:
        return None, missing
    url = template
    for name in used:
        url = url.replace("{" + name + "}", quote(values[name], safe=""))
    return url, ()

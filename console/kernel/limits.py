"""Size limits, and the one way a body that is too large is refused: 413 in the error shape,
naming the limit. The trace ingest, the document API, the editor and Django's own upload
limit all refuse through `too_large`. And the limits of a name, a description and a note, with
`text_findings`, the one judgement of such a text (the serializers' max_length are these)."""

from __future__ import annotations

from context_runtime.findings import Finding
from context_runtime.text import INVALID_TEXT, unstorable

from console.kernel.errors import PayloadTooLarge

MAX_NAME_CHARS = 200  # the name columns of agents, environments and documents
MAX_DESCRIPTION_CHARS = 2000  # an agent's or an environment's description
MAX_NOTE_CHARS = 2000  # a version's note


def text_findings(text: str, path: str, *, max_chars: int) -> list[Finding]:
    """Why `text` cannot be kept where at most `max_chars` go, at `path`: a NUL character or
    a lone surrogate (context_runtime.text), or its length. The same as the API's DRF fields
    refuse (`invalid_text` here, their `null_characters_not_allowed` there; `max_length`)."""
    problem = unstorable(text)
    if problem:
        return [Finding(path, INVALID_TEXT, f"{path} contains {problem}.")]
    if len(text) > max_chars:
        return [
            Finding(path, "max_length", f"At most {max_chars:,} characters, not {len(text):,}.")
        ]
    return []


def _size(limit: int) -> str:
    if limit >= 1024 * 1024 and limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    if limit >= 1024 and limit % 1024 == 0:
        return f"{limit // 1024} KiB"
    return f"{limit:,} bytes"


def too_large(what: str, limit: int, *, advice: str = "") -> PayloadTooLarge:
    """The refusal of a body over `limit` bytes; `what` names it ("A trace batch")."""
    message = f"{what} is larger than the limit of {_size(limit)}." + (
        f" {advice}" if advice else ""
    )
    return PayloadTooLarge(
        message,
        code="payload_too_large",
        details=[Finding("", "too_large", f"The limit is {limit:,} bytes.")],
    )


def _declared(request) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def check_request_size(request, limit: int, *, what: str = "The request body") -> None:
    """Refuse a body over `limit` before it is parsed (it stays readable for the parser)."""
    if _declared(request) > limit or len(request.body) > limit:
        raise too_large(what, limit)


def read_limited_body(request, limit: int, *, what: str = "The request body", advice: str = ""):
    """The raw body, refused before reading when Content-Length says it is too big, and again
    when the bytes actually read exceed the limit (a missing or lying header)."""
    if _declared(request) > limit:
        raise too_large(what, limit, advice=advice)
    raw = getattr(request, "_request", request)  # a DRF request wraps Django's
    body = raw.read(limit + 1)
    if len(body) > limit:
        raise too_large(what, limit, advice=advice)
    return body

"""The one rule for "give a reason": rollbacks, rejections, revocations, grants and looks at
snapshots all ask for one, and all judge it the same way."""

from __future__ import annotations

from context_runtime.findings import Finding

from console.kernel.errors import ValidationFailed

MIN_REASON_CHARS = 3
MAX_REASON_CHARS = 1000


def reason_clean(text, *, ask: str = "Give a reason.", path: str = "reason") -> str:
    """The reason without surrounding blanks; refused (400, naming `path`) when it is shorter
    than MIN_REASON_CHARS or longer than MAX_REASON_CHARS. `ask` says what it is for."""
    reason = text.strip() if isinstance(text, str) else ""
    if len(reason) < MIN_REASON_CHARS:
        raise ValidationFailed(
            ask,
            details=[Finding(path, "required", f"Write at least {MIN_REASON_CHARS} characters.")],
        )
    if len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed(
            f"The reason is {len(reason):,} characters; keep it under {MAX_REASON_CHARS:,}.",
            details=[Finding(path, "too_long", f"At most {MAX_REASON_CHARS:,} characters.")],
        )
    return reason

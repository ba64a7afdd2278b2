"""The trace list's filters, read from a URL query (the page and the API share them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, time

from context_runtime.wire import DECISIONS, STATUSES
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime


def _moment(text: str, *, end_of_day: bool) -> datetime | None:
    """An ISO datetime, or a date (start of the day for `since`, end for `until`), in UTC."""
    value = parse_datetime(text)
    if value is None:
        day = parse_date(text)
        if day is None:
            raise ValueError(text)
        value = datetime.combine(day, time.max if end_of_day else time.min)
    if timezone.is_naive(value):
        return timezone.make_aware(value, UTC)
    # In UTC: PostgreSQL refuses offsets beyond ±15:59, which Python allows (-23:59).
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00-05:00 is past the last moment Python holds
        raise ValueError(text) from None


@dataclass
class TraceFilters:
    agent: str = ""
    environment: str = ""
    strategy: str = ""
    version: int | None = None
    status: str = ""
    decision: str = ""
    source: str = ""
    reason: str = ""
    since: datetime | None = None
    until: datetime | None = None
    errors: dict[str, str] = field(default_factory=dict)

    PARAMETER_HELP = {
        "agent": "agent key",
        "environment": "environment key",
        "strategy": "strategy key, e.g. after_sales_consultation",
        "version": "strategy version number",
        "status": "one of " + ", ".join(STATUSES),
        "decision": "traces with a candidate of this decision: " + ", ".join(DECISIONS),
        "source": "with decision/reason: the candidate's source, e.g. applicable_policy",
        "reason": "with decision/source: the candidate's exact reason",
        "since": "ISO date or datetime (UTC when no offset)",
        "until": "ISO date or datetime (a date includes the whole day)",
    }

    @classmethod
    def from_query(cls, query) -> TraceFilters:
        """Read the filters; an unreadable value is dropped and explained in `errors`."""
        filters = cls(
            **{
                name: (query.get(name) or "").strip()
                for name in ("agent", "environment", "strategy", "source", "reason")
            }
        )
        text = (query.get("version") or "").strip()
        if text:
            if text.isdigit():
                filters.version = int(text)
            else:
                filters.errors["version"] = "a version is a whole number, e.g. 3"
        for name, choices in (("status", STATUSES), ("decision", DECISIONS)):
            text = (query.get(name) or "").strip()
            if text in choices:
                setattr(filters, name, text)
            elif text:
                filters.errors[name] = "must be one of " + ", ".join(choices)
        for name in ("since", "until"):
            text = (query.get(name) or "").strip()
            if text:
                try:
                    setattr(filters, name, _moment(text, end_of_day=name == "until"))
                except ValueError:
                    filters.errors[name] = "use a date like 2026-11-30 or 2026-11-30T09:00"
        return filters

    def as_dict(self) -> dict:
        """The active filters, JSON-ready (for the access log)."""
        data = asdict(self)
        data.pop("errors")
        return {
            key: value.isoformat() if isinstance(value, datetime) else value
            for key, value in data.items()
            if value not in ("", None)
        }

    @property
    def candidate_filter(self) -> dict:
        """Lookups on a trace's candidates ('source S excluded as D for reason R')."""
        return {
            key: value
            for key, value in (
                ("decision", self.decision),
                ("source", self.source),
                ("reason", self.reason),
            )
            if value
        }

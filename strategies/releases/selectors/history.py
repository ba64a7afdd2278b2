"""The release history of an agent, newest first, filtered (the history page and the API)."""

from __future__ import annotations

from django.core.paginator import Paginator

from strategies.releases.models import ReleaseEvent

HISTORY_PAGE_SIZE = 25


def history_events(*, agent, document_key: str = "", environment_key: str = ""):
    """Release events of an agent, newest first, filtered (the history page and the API)."""
    events = (
        ReleaseEvent.objects.filter(release__document__agent=agent)
        .select_related("release__document", "release__environment", "from_version", "to_version")
        .prefetch_related("change_records")  # the external change record it went live on
    )
    if document_key:
        events = events.filter(release__document__key=document_key)
    if environment_key:
        events = events.filter(release__environment__key=environment_key)
    return events.order_by("-occurred_at", "-id")


def history_page(*, agent, document_key: str = "", environment_key: str = "", page=1):
    """Release events of an agent, newest first, filtered from the URL."""
    events = history_events(agent=agent, document_key=document_key, environment_key=environment_key)
    return Paginator(events, HISTORY_PAGE_SIZE).get_page(page)

"""Reads of webhooks and their delivery log."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db.models import Count, Prefetch, Q

from strategies.catalog.dependents import Reference
from strategies.delivery.models import Webhook, WebhookAttempt, WebhookDelivery


def webhooks_list():
    return list(
        Webhook.objects.select_related("environment")
        .annotate(
            failed=Count("deliveries", filter=Q(deliveries__status="failed")),
            delivered=Count("deliveries", filter=Q(deliveries__status="delivered")),
        )
        .order_by("deleted_at", "environment__position", "url")
    )


def deliveries_page(*, webhook, status: str = "", page=1):
    deliveries = webhook.deliveries.prefetch_related(
        Prefetch("attempts", queryset=WebhookAttempt.objects.order_by("number"))
    )
    if status:
        deliveries = deliveries.filter(status=status)
    return Paginator(deliveries.order_by("-created_at", "-id"), 25).get_page(page)


def delivery_counts(*, webhook) -> dict[str, int]:
    """{status: deliveries} for every status, zero included."""
    rows = webhook.deliveries.order_by().values("status").annotate(n=Count("id"))
    counts = {row["status"]: row["n"] for row in rows}
    return {status: counts.get(status, 0) for status in WebhookDelivery.Status.values}


def deliveries_recent(*, webhook, limit: int = 10) -> list[WebhookDelivery]:
    return list(webhook.deliveries.order_by("-created_at", "-id")[:limit])


def references_to_environment(environment) -> list[Reference]:
    """Webhooks, deleted ones too, refer to their environment (its delete is refused)."""
    if Webhook.objects.filter(environment=environment).exists():
        return [Reference("has_webhooks", "it has webhooks")]
    return []

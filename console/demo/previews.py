"""Demo impact preview (DEMO.md): the saved preview of ops' pending request for prod — what
after_sales_consultation v3 does to prod's last 7 days of traffic, which ops2 reads on the
approval page before deciding. Requested as ops and run through the previews' own services,
never written as rows: the replay a worker runs (`preview_execute`), here in the loader's
process with no task sent, so a worker already running cannot race it for the shards.
Idempotent: once prod has a preview of v3's content, nothing is run again.

Loaded after the rest of the world is committed (console.demo.world): a preview request is a
transaction of its own, and it replays the traces console.demo.traces stored."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from strategies.releases.models import ApprovalRequest
from traces.previews import selectors, services


def load(*, stdout=None) -> None:
    pending = (
        ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING,
            environment__key="prod",
            document__key="after_sales_consultation",
            requested_by__username="ops",
        )
        .select_related("version", "environment")
        .first()
    )
    if pending is None:  # withdrawn or decided in this data directory since: nothing to show
        return
    version, environment = pending.version, pending.environment
    if selectors.saved_preview(version=version, environment=environment) is not None:
        return
    ops = get_user_model().objects.get(username="ops")
    preview, _ = services.preview_request(
        actor=ops, version=version, environment=environment, queue=False
    )
    state = services.preview_execute(preview.pk)
    if stdout is not None:
        stdout.write(
            f"Demo impact preview of v{version.number} in {environment.key} "
            f"(ops' pending request): {state}."
        )

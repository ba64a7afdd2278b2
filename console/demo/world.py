"""Loading the whole demo world, in dependency order."""

from __future__ import annotations

from django.db import transaction

from console.demo import alerts, documents, outcomes, previews, releases, traces, users

# Users need the agents, releases the versions and users, traces the releases, outcomes
# the traces (and the admin who declares their kinds); the demo alert rule, the admin.
LOADERS = (documents, users, releases, traces, outcomes, alerts)
# Once those are committed: the saved impact preview of the pending prod request, requested
# and run through the previews' services (each request a transaction of its own).
COMMITTED_LOADERS = (previews,)


def load_world(*, stdout) -> None:
    with transaction.atomic():
        for loader in LOADERS:
            loader.load(stdout=stdout)
    for loader in COMMITTED_LOADERS:
        loader.load(stdout=stdout)

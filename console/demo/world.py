"""Loading the whole demo world, in dependency order."""

from __future__ import annotations

from console.demo import documents, outcomes, releases, traces, users

# Users need the agents, releases the versions and users, traces the releases, outcomes
# the traces (and the admin who declares their kinds).
LOADERS = (documents, users, releases, traces, outcomes)


def load_world(*, stdout) -> None:
    for loader in LOADERS:
        loader.load(stdout=stdout)

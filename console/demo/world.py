"""Loading the whole demo world, in dependency order."""

from __future__ import annotations

from console.demo import documents, releases, traces, users

# Users need the agents, releases the versions and users, traces the releases.
LOADERS = (documents, users, releases, traces)


def load_world(*, stdout) -> None:
    for loader in LOADERS:
        loader.load(stdout=stdout)

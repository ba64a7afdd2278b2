"""Done-when: 50 concurrent publish/rollback attempts on one release, real PostgreSQL —
exactly one success per revision, the rest 409, the history complete."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from console.kernel.errors import Conflict
from strategies.releases.models import Release, ReleaseEvent
from strategies.releases.services import release_publish, release_rollback
from tests.factories import release_setup

pytestmark = pytest.mark.django_db(transaction=True)
ATTEMPTS = 50


def run_concurrently(attempts):
    """Start every attempt at the same moment, each thread on its own connection."""
    barrier = threading.Barrier(len(attempts))
    outcomes: list[object] = [None] * len(attempts)

    def run(i, attempt):
        try:
            barrier.wait()
            outcome = attempt()
            outcomes[i] = getattr(outcome, "release", outcome)  # publish returns an outcome
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test inspects
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(attempts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return outcomes


@pytest.fixture
def live_v3():
    w = release_setup()
    for n in (1, 2, 3):
        release_publish(version=w.strategy[n], environment=w.envs["sg-test"], actor=w.ops)
    return w, Release.objects.get(document=w.strategy[3].document, environment=w.envs["sg-test"])


def attempts_at(w, release, expected_revision):
    def publish(n):
        return lambda: release_publish(
            version=w.strategy[n],
            environment=w.envs["sg-test"],
            actor=w.ops,
            reason="race",
            expected_revision=expected_revision,
        )

    def rollback(n):
        return lambda: release_rollback(
            release=release,
            to_version=w.strategy[n],
            actor=w.admin,
            reason="race",
            expected_revision=expected_revision,
        )

    return [(publish if i % 2 else rollback)(1 + i % 2) for i in range(ATTEMPTS)]


def assert_history_complete(release):
    revisions = list(
        ReleaseEvent.objects.filter(release=release)
        .order_by("revision")
        .values_list("revision", flat=True)
    )
    assert revisions == list(range(1, release.revision + 1))


def test_release__50_concurrent_changes_at_one_revision__one_wins_rest_409(live_v3):
    w, release = live_v3

    outcomes = run_concurrently(attempts_at(w, release, expected_revision=release.revision))

    winners = [o for o in outcomes if not isinstance(o, Exception)]
    losers = [o for o in outcomes if isinstance(o, Exception)]
    assert len(winners) == 1
    assert len(losers) == ATTEMPTS - 1
    assert all(isinstance(o, Conflict) and o.status == 409 for o in losers)
    assert all(o.extra["current"]["revision"] == 4 for o in losers)
    release.refresh_from_db()
    assert release.revision == 4
    assert release.version_id == winners[0].version_id
    assert_history_complete(release)


def test_release__50_concurrent_changes_reading_live_revision__one_winner_per_revision(live_v3):
    w, release = live_v3

    outcomes = run_concurrently(attempts_at(w, release, expected_revision=None))

    winners = [o for o in outcomes if not isinstance(o, Exception)]
    losers = [o for o in outcomes if isinstance(o, Exception)]
    assert all(isinstance(o, Conflict) for o in losers), losers[:3]
    release.refresh_from_db()
    assert release.revision == 3 + len(winners)
    assert sorted(r.revision for r in winners) == list(range(4, release.revision + 1))
    assert_history_complete(release)

"""Who serves what, as an attacker and an operator under load found it (issue 31, item 2): an
instance row belongs to the token that reported it, a token has a bounded number of live
instances, and the releases page's Runtimes card stays small and exact with 10,000 of them —
stopped ones leaving it after a while, never with a LIVE or OLD VERSION badge."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from strategies.delivery.models import ConfigPayload
from strategies.releases.services import release_publish
from strategies.runtime.auth import token_hash
from strategies.runtime.models import RuntimeInstance, RuntimeToken
from strategies.runtime.selectors import CARD_ROWS, PAGE_ROWS, runtimes_of_agent
from strategies.runtime.tokens import runtime_token_revoke
from tests.factories import bearer, release_setup, runtime_instances, runtime_token

AGENT = "assistant_professional"
HEARTBEAT = "/api/v1/runtime/heartbeat"


@pytest.fixture
def world(db):
    w = release_setup()
    release_publish(version=w.profile[1], environment=w.envs["sg-test"], actor=w.ops)
    release_publish(version=w.strategy[3], environment=w.envs["sg-test"], actor=w.ops)
    w.sg = w.envs["sg-test"]
    w.live = ConfigPayload.objects.get(agent=w.agent, environment=w.sg).etag
    return w


def beat(secret: str, instance: str, *, etag: str, transport: str = "stream", client=None):
    body = {
        "instance": instance,
        "sdk_version": "0.2.0",
        "transport": transport,
        "agents": {AGENT: {"etag": etag, "documents": {}, "resolution": "fresh"}},
    }
    return (client or Client()).post(
        HEARTBEAT, data=json.dumps(body), content_type="application/json", **bearer(secret)
    )


def token_of(secret: str) -> RuntimeToken:
    return RuntimeToken.objects.get(token_hash=token_hash(secret))


def sg_test(world):
    return next(e for e in runtimes_of_agent(agent=world.agent) if e.environment == world.sg)


# --------------------------------------------------------------------------- ownership
def test_heartbeat__another_tokens_instance__refused_and_the_row_stays_its_owners(world):
    # Given a runtime still on an old configuration ("0 of 1 serve")
    owner = runtime_token(world.sg)
    assert beat(owner, "pod-a:7", etag='"r1-old"').status_code == 200
    assert sg_test(world).summary.startswith("0 of 1 runtime")

    # When a config:read-only token of the same environment reports that instance as serving
    # what is live, and then as stopped
    other = runtime_token(world.sg, capabilities=("config:read",))
    forged = beat(other, "pod-a:7", etag=world.live)
    stopped = beat(other, "pod-a:7", etag=world.live, transport="stopped")

    # Then both are refused, and the card still says what the runtime itself said
    for answer in (forged, stopped):
        assert answer.status_code == 409, answer.content
        assert answer.json()["error"]["code"] == "instance_taken"
    row = RuntimeInstance.objects.get(instance="pod-a:7")
    assert (row.etag, row.transport, row.token_id) == ('"r1-old"', "stream", token_of(owner).pk)
    assert sg_test(world).summary.startswith("0 of 1 runtime")


def test_heartbeat__owner_stopped_or_its_token_revoked__another_token_may_take_the_id(world):
    # Given two instances of one token: one stopped cleanly, one whose token is then revoked
    old = runtime_token(world.sg)
    assert beat(old, "pod-a", etag=world.live).status_code == 200
    assert beat(old, "pod-a", etag=world.live, transport="stopped").status_code == 200
    assert beat(old, "pod-b", etag=world.live).status_code == 200
    new = runtime_token(world.sg, capabilities=("config:read",))
    assert beat(new, "pod-b", etag=world.live).status_code == 409
    runtime_token_revoke(
        token=RuntimeInstance.objects.get(instance="pod-b").token, actor=world.admin
    )

    # When the new token reports both ids (restarted processes with the rotated token)
    answers = [beat(new, pod, etag=world.live) for pod in ("pod-a", "pod-b")]

    # Then both are recorded as the new token's, serving
    assert [a.status_code for a in answers] == [200, 200]
    assert set(RuntimeInstance.objects.values_list("token", flat=True)) == {token_of(new).pk}
    assert sg_test(world).summary.startswith("2 of 2 runtimes serve")


def test_heartbeat__stopped_for_an_instance_never_reported__nothing_recorded(world):
    secret = runtime_token(world.sg)

    answer = beat(secret, "pod-z", etag=world.live, transport="stopped")

    assert answer.status_code == 200 and answer.json()["recorded"] == 0
    assert not RuntimeInstance.objects.exists()


# --------------------------------------------------------------------------- the bound
def test_heartbeat__token_at_its_bound__a_new_instance_429_known_ones_still_recorded(
    world, settings
):
    settings.RUNTIME_INSTANCES_PER_TOKEN = 3
    secret = runtime_token(world.sg)
    for n in range(3):
        assert beat(secret, f"pod-{n}", etag=world.live).status_code == 200

    refused = beat(secret, "pod-3", etag=world.live)

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_instances"
    assert int(refused["Retry-After"]) > 0  # when to try again, as every 429 says
    assert not RuntimeInstance.objects.filter(instance="pod-3").exists()
    # the live ones keep reporting; another token has its own bound
    assert beat(secret, "pod-0", etag=world.live).status_code == 200
    assert beat(runtime_token(world.sg), "pod-3", etag=world.live).status_code == 200
    # one that stops frees its place
    assert beat(secret, "pod-1", etag=world.live, transport="stopped").status_code == 200
    assert beat(secret, "pod-4", etag=world.live).status_code == 200
    assert sg_test(world).summary.startswith("4 of 4 runtimes serve")


@pytest.mark.django_db(transaction=True)
def test_heartbeat__many_new_instances_at_once__never_past_the_bound(settings):
    w = release_setup()
    release_publish(version=w.strategy[3], environment=w.envs["sg-test"], actor=w.ops)
    settings.RUNTIME_INSTANCES_PER_TOKEN = 4
    secret = runtime_token(w.envs["sg-test"])
    start = threading.Barrier(12)
    statuses = []

    def runtime(n):
        try:
            start.wait()
            statuses.append(beat(secret, f"pod-{n}", etag='"r1-x"').status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=runtime, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(statuses) == [200] * 4 + [429] * 8
    assert RuntimeInstance.objects.count() == 4


# --------------------------------------------------------------------------- the card
def test_runtimes_card__stopped_and_gone_runtimes__no_live_or_old_version_badge(world, client):
    now = timezone.now()
    # the live configuration changed long ago: a runtime on another one is lagging
    ConfigPayload.objects.filter(environment=world.sg).update(rendered_at=now - timedelta(hours=1))
    secret = runtime_token(world.sg)
    runtime_instances(
        environment=world.sg, agent=world.agent, token_secret=secret, count=1,
        prefix="serving", etag=world.live,
    )  # fmt: skip
    runtime_instances(
        environment=world.sg, agent=world.agent, token_secret=secret, count=1,
        prefix="lagging", etag='"r1-old"',
    )  # fmt: skip
    for prefix, etag in (("stopped-live", world.live), ("stopped-old", '"r1-old"')):
        runtime_instances(
            environment=world.sg, agent=world.agent, token_secret=secret, count=1,
            prefix=prefix, etag=etag, transport="stopped", last_seen=now - timedelta(minutes=1),
        )  # fmt: skip
    runtime_instances(
        environment=world.sg, agent=world.agent, token_secret=secret, count=1, prefix="killed",
        etag=world.live, last_seen=now - timedelta(minutes=5),
    )  # fmt: skip
    client.force_login(world.ops)

    html = client.get(f"/releases/{AGENT}/runtimes/", HTTP_HX_REQUEST="true").content.decode()

    rows = {
        part.split('"', 1)[0]: part.split("</tr>", 1)[0].lower()
        for part in html.split('data-instance="')[1:]
    }
    assert "✓ live" in rows["serving-0"] and "old version" in rows["lagging-0"]
    for gone in ("stopped-live-0", "stopped-old-0", "killed-0"):
        assert "✓ live" not in rows[gone] and "old version" not in rows[gone], rows[gone]
    assert "1 of 2 runtimes serve" in html
    assert "1 warning" in html  # the lagging one only


def test_runtimes_card__stopped_long_ago__leaves_the_list_counted_as_stopped_today(world, client):
    now = timezone.now()
    secret = runtime_token(world.sg)
    runtime_instances(
        environment=world.sg, agent=world.agent, token_secret=secret, count=24,
        prefix="stopped", etag=world.live, transport="stopped", last_seen=now - timedelta(minutes=11),
    )  # fmt: skip
    runtime_instances(
        environment=world.sg, agent=world.agent, token_secret=secret, count=1, prefix="just",
        etag=world.live, transport="stopped",
    )  # fmt: skip
    runtime_instances(
        environment=world.sg, agent=world.agent, token_secret=secret, count=3, prefix="pod",
        etag=world.live,
    )  # fmt: skip
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    stopped_today = 1 + (24 if now - timedelta(minutes=11) >= midnight else 0)
    client.force_login(world.ops)

    html = client.get(f"/releases/{AGENT}/runtimes/", HTTP_HX_REQUEST="true").content.decode()

    listed = [p.split('"', 1)[0] for p in html.split('data-instance="')[1:]]
    assert sorted(listed) == ["just-0", "pod-0", "pod-1", "pod-2"]
    assert listed[-1] == "just-0"  # stopped ones after the serving
    assert f"{stopped_today} stopped today" in html
    assert "3 of 3 runtimes serve" in html


@pytest.fixture
def crowd(world):
    """10,000 runtimes in sg-test: 9,000 serving what is live, 600 on an old configuration,
    300 stopped a minute ago, 100 unheard for 5 minutes."""
    secret = runtime_token(world.sg)
    now = timezone.now()
    for prefix, count, fields in (
        ("serving", 9000, {"etag": world.live}),
        ("lagging", 600, {"etag": '"r1-old"'}),
        ("stopped", 300, {"etag": world.live, "transport": "stopped"}),
        ("killed", 100, {"etag": world.live, "last_seen": now - timedelta(minutes=5)}),
    ):
        runtime_instances(
            environment=world.sg, agent=world.agent, token_secret=secret, count=count,
            prefix=prefix, **fields,
        )  # fmt: skip
    ConfigPayload.objects.filter(environment=world.sg).update(rendered_at=now - timedelta(hours=1))
    return world


def _card(client, world) -> tuple[str, int]:
    answer = client.get(f"/releases/{AGENT}/runtimes/", HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    return answer.content.decode(), len(answer.content)


def test_runtimes_card__10000_runtimes__counted_exactly_a_page_listed_same_queries(
    crowd, client, django_assert_num_queries
):
    client.force_login(crowd.ops)
    _card(client, crowd)  # warm: the session and the policy's first reads
    with CaptureQueriesContext(connection) as queries:
        _card(client, crowd)
    queries_with_10000 = len(queries)
    assert queries_with_10000 > 3, queries.captured_queries  # the page's reads were captured

    html, size = _card(client, crowd)

    section = html.split('data-environment="sg-test"', 1)[1].split("</section>", 1)[0]
    assert "9000 of 9600 runtimes serve" in section
    assert "600 warnings" in section
    assert section.count("data-instance=") == CARD_ROWS
    assert "lagging-" in section.split("data-instance=")[1]  # problems listed first
    assert "300 stopped today" in section
    assert "all 10000 runtimes in sg-test" in section
    assert size < 40_000, size  # was 1.36 MiB with 2,000

    # the same number of queries as with 10 runtimes
    RuntimeInstance.objects.exclude(instance__in=[f"serving-{n}" for n in range(10)]).delete()
    with django_assert_num_queries(queries_with_10000):
        html, _ = _card(client, crowd)
    assert "10 of 10 runtimes serve" in html


def test_runtimes_page__one_environment__pages_through_every_runtime(crowd, client):
    client.force_login(crowd.ops)

    pages = [
        client.get(f"/releases/{AGENT}/runtimes/", {"environment": "sg-test", "page": n})
        for n in (1, 100)
    ]

    assert [p.status_code for p in pages] == [200, 200]
    first, last = (p.content.decode() for p in pages)
    assert first.count("data-instance=") == PAGE_ROWS
    assert f"1–{PAGE_ROWS} of 10000 runtimes" in first and "page 1 of 100" in first
    assert "9901–10000 of 10000 runtimes" in last
    assert last.count("data-instance=") == PAGE_ROWS
    unknown = client.get(f"/releases/{AGENT}/runtimes/", {"environment": "nowhere"})
    assert unknown.status_code == 404

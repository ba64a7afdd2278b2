"""The config client (RUNTIME_API §1) against a fake console on loopback: it serves the last
good copy through outages, garbage and invalid bodies, says where each read came from, and
starts from its disk copy or a bootstrap file when the console is unreachable."""

from __future__ import annotations

import copy
import json
import logging
import random
import time

import msgspec
import pytest
from context_runtime.client import (
    BOOTSTRAP,
    CACHED,
    ERROR,
    FRESH,
    STALE,
    ConfigClient,
    Resolution,
    validate_config_payload,
)
from context_runtime.client._http import backoff_delay
from fake_console import (
    AGENT,
    ERROR_500,
    GARBAGE,
    HANG,
    OK,
    PAYLOAD,
    TOKEN,
    UNAUTHORIZED,
    dead_url,
)

STRATEGY = "after_sales_consultation"


@pytest.fixture
def clients():
    made: list[ConfigClient] = []
    yield made
    for client in made:
        client.stop(timeout=0.5)


@pytest.fixture
def make_client(clients, tmp_path):
    def make(url, **options):
        settings = {
            "poll_interval": 0.05,
            # Generous: under CI load a 0.3 s answer is late, and one late poll rightly turns
            # the copy stale (the hang tests set their own short timeout).
            "timeout": 2.0,
            "backoff_initial": 0.02,
            "backoff_max": 0.1,
            "cache_path": tmp_path / "config-cache.json",
        }
        settings.update(options)
        client = ConfigClient(url, TOKEN, AGENT, **settings)
        clients.append(client)
        return client

    return make


def wait_for(predicate, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def strategy_entry(version: int, max_input_tokens: int) -> dict:
    body = copy.deepcopy(PAYLOAD["strategies"][STRATEGY]["body"])
    body["budget"]["max_input_tokens"] = max_input_tokens
    return {"version": version, "body": body}


# ---------------------------------------------------------------- serving fresh config


def test_client__console_serves_config__ready_and_fresh(console, make_client):
    client = make_client(console.url)

    assert client.start(wait=2.0)

    snap = client.snapshot()
    assert snap.etag == console.etag
    assert snap.strategy(STRATEGY).version == 3
    assert snap.strategy(STRATEGY).body["budget"]["max_input_tokens"] == 8000
    assert snap.profile.version == 7
    assert snap.strategy("nope") is None
    assert snap.documents == {STRATEGY: 3, "small_talk": 1, "profile": 7}
    assert snap.resolution.reason == FRESH
    assert snap.resolution.fallback is False
    status = client.status()
    assert status["ready"] is True
    assert status["source"] == "console"
    assert status["etag"] == console.etag
    assert status["last_error"] is None


def test_client__config_unchanged__polls_with_if_none_match_and_gets_304(console, make_client):
    client = make_client(console.url)
    client.start(wait=2.0)

    assert wait_for(lambda: len(console.config_requests) >= 4)

    first, *later = console.config_requests
    assert first == (None, 200)
    assert all(sent == console.etag and status == 304 for sent, status in later[:3])
    assert client.snapshot().resolution.reason == FRESH


def test_client__release_changes__next_poll_serves_new_version(console, make_client):
    client = make_client(console.url)
    client.start(wait=2.0)

    new_etag = console.publish(**{STRATEGY: strategy_entry(4, 9000)})

    assert wait_for(lambda: client.snapshot().etag == new_etag)
    assert client.snapshot().strategy(STRATEGY).version == 4
    assert client.snapshot().strategy(STRATEGY).body["budget"]["max_input_tokens"] == 9000


def test_client__on_change_callback__called_with_new_snapshot(console, make_client):
    seen = []
    client = make_client(console.url, on_change=seen.append)
    client.start(wait=2.0)
    new_etag = console.publish(**{STRATEGY: strategy_entry(4, 9000)})

    assert wait_for(lambda: len(seen) == 2)
    assert [snap.etag for snap in seen][-1] == new_etag


def test_client__request_refresh__publish_served_at_once_not_at_next_poll(console, make_client):
    # A runtime's "reload config" endpoint: the release is live without waiting 30 s.
    client = make_client(console.url, poll_interval=30.0)
    client.start(wait=2.0)
    new_etag = console.publish(**{STRATEGY: strategy_entry(4, 9000)})

    client.request_refresh()

    assert wait_for(lambda: client.snapshot().etag == new_etag, timeout=1.0)
    assert client.snapshot().strategy(STRATEGY).version == 4
    assert client.snapshot().resolution.reason == FRESH


def test_client__refresh_now__not_started__polls_in_the_calling_thread(console, make_client):
    # For scripts: one poll, no background thread; the answer says whether it worked.
    client = make_client(console.url)

    assert client.refresh_now() is True
    assert client.snapshot().etag == console.etag
    assert client.snapshot().resolution.reason == FRESH
    new_etag = console.publish(**{STRATEGY: strategy_entry(4, 9000)})
    assert client.refresh_now() is True
    assert client.snapshot().etag == new_etag
    assert client.status()["running"] is False

    console.modes["config"] = ERROR_500

    assert client.refresh_now() is False
    assert client.snapshot().etag == new_etag  # the last good copy stays
    assert "HTTP 500" in client.status()["last_error"]


# ---------------------------------------------------------------- outages and bad answers


def test_client__console_returns_500__serves_last_good_copy_as_stale_with_age(console, make_client):
    client = make_client(console.url)
    client.start(wait=2.0)
    good_etag = console.etag

    console.modes["config"] = ERROR_500

    assert wait_for(lambda: client.snapshot().resolution.reason == STALE)
    snap = client.snapshot()
    first_age = snap.resolution.age_seconds
    time.sleep(0.05)
    assert snap.etag == good_etag
    assert snap.strategy(STRATEGY).version == 3
    assert snap.resolution.fallback is True
    assert snap.resolution.age_seconds > first_age > 0
    status = client.status()
    assert status["ready"] is True
    assert status["reason"] == STALE
    assert "HTTP 500" in status["last_error"]
    assert status["consecutive_failures"] >= 1


def test_client__console_returns_garbage__keeps_last_good_copy_as_stale(console, make_client):
    client = make_client(console.url)
    client.start(wait=2.0)
    good_etag = console.etag

    console.publish(**{STRATEGY: strategy_entry(4, 9000)})
    console.modes["config"] = GARBAGE

    assert wait_for(lambda: client.snapshot().resolution.reason == STALE)
    assert client.snapshot().etag == good_etag
    assert client.snapshot().strategy(STRATEGY).version == 3
    assert "invalid JSON" in client.status()["last_error"]


def test_client__body_fails_validation__whole_payload_rejected_and_reason_in_status(
    console, make_client, caplog
):
    client = make_client(console.url)
    client.start(wait=2.0)
    good_etag = console.etag
    caplog.set_level(logging.WARNING, logger="context_runtime.client")

    def bad_release(payload):
        payload["strategies"]["small_talk"] = {"version": 2, "body": {"required": ["x"]}}
        payload["strategies"][STRATEGY]["body"]["budget"]["max_input_tokens"] = -5
        payload["strategies"][STRATEGY]["version"] = 4

    console.publish(bad_release)

    assert wait_for(lambda: client.status()["rejected_payloads"] >= 1)
    snap = client.snapshot()
    assert snap.etag == good_etag
    assert snap.strategy(STRATEGY).version == 3
    assert snap.strategy("small_talk").version == 1  # the valid part is not taken either
    assert snap.resolution.reason == STALE
    status = client.status()
    assert status["ready"] is True
    assert f"strategies.{STRATEGY}.body.budget.max_input_tokens" in status["last_error"]
    assert "strategies.small_talk.body.budget" in status["last_error"]
    # The poller counts the rejection a moment before it logs it (another thread).
    assert wait_for(lambda: any("rejected configuration" in r.getMessage() for r in caplog.records))


def test_client__console_hangs__reads_stay_memory_fast_and_copy_turns_stale(console, make_client):
    client = make_client(console.url, timeout=0.5)
    client.start(wait=2.0)
    console.modes["config"] = HANG

    time.sleep(0.1)  # a poll is now waiting on the console
    started = time.perf_counter()
    for _ in range(10_000):
        client.snapshot().strategy(STRATEGY)
    elapsed = time.perf_counter() - started

    # 10,000 reads in well under one console timeout: memory reads (typically ~2 ms in all).
    assert elapsed < 0.25
    assert wait_for(lambda: client.snapshot().resolution.reason == STALE)
    assert client.snapshot().strategy(STRATEGY).version == 3
    # (The copy can read stale by its age a moment before the timed-out poll is noted.)
    assert wait_for(lambda: "no answer within" in (client.status()["last_error"] or ""))


def test_client__token_refused__unauthorized_and_status_says_why(console, make_client):
    client = make_client(console.url)
    client.start(wait=2.0)

    console.modes["config"] = UNAUTHORIZED

    assert wait_for(lambda: client.snapshot().resolution.reason == "unauthorized")
    assert "401 not_authenticated" in client.status()["last_error"]


def test_client__token_revoked__serves_last_good_copy_loudly_and_recovers(
    console, make_client, caplog
):
    changes = []
    client = make_client(console.url, auth_backoff_initial=0.05, on_health_change=changes.append)
    client.start(wait=2.0)
    assert wait_for(lambda: client.health()["state"] == "ok")

    console.token = "cc_rt_another-token"  # the runtime's token is revoked

    assert wait_for(lambda: client.health()["state"] == "unauthorized")
    snapshot = client.snapshot()
    assert snapshot.strategy(STRATEGY).version == 3  # the last good copy is still served
    resolution = snapshot.resolution
    assert (resolution.reason, resolution.fallback) == ("unauthorized", True)
    # The trace says so too: support read "the console refused its token" on the trace page.
    assert resolution.trace_fields()["config_resolution"] == "unauthorized"
    status = client.status()
    assert status["unauthorized"] is True and status["reason"] == "unauthorized"
    assert client.health()["healthy"] is False
    assert "refuses the runtime token" in caplog.text
    assert any(r.levelname == "ERROR" for r in caplog.records)

    console.token = TOKEN  # fixed

    assert wait_for(lambda: client.health()["state"] == "ok", timeout=5.0)
    assert client.status()["unauthorized"] is False
    # The callback runs on the client's thread just after the state changes: wait for it.
    assert wait_for(lambda: len(changes) >= 3)
    assert [change["state"] for change in changes] == ["ok", "unauthorized", "ok"]


def test_client__token_revoked__backs_off_instead_of_retrying_hot(console, make_client):
    client = make_client(
        console.url, backoff_initial=0.01, backoff_max=2.0, auth_backoff_initial=0.4
    )
    client.start(wait=2.0)
    console.token = "cc_rt_another-token"
    assert wait_for(lambda: client.status()["unauthorized"])
    before = len(console.config_requests)

    time.sleep(1.0)

    # Ordinary failures would retry every 10-20 ms here; a refused token waits 0.2-0.4 s,
    # then 0.4-0.8 s…
    assert len(console.config_requests) - before <= 4


def test_client__console_recovers__back_to_fresh_with_new_release(console, make_client):
    client = make_client(console.url)
    client.start(wait=2.0)
    console.modes["config"] = ERROR_500
    assert wait_for(lambda: client.snapshot().resolution.reason == STALE)

    new_etag = console.publish(**{STRATEGY: strategy_entry(4, 9000)})
    console.modes["config"] = OK

    assert wait_for(lambda: client.snapshot().etag == new_etag)
    assert client.snapshot().resolution.reason == FRESH
    assert client.status()["consecutive_failures"] == 0


def test_client__copy_not_confirmed_for_stale_after__reads_stale(console, make_client):
    client = make_client(console.url, poll_interval=60.0, stale_after=0.1)
    client.start(wait=2.0)
    assert client.snapshot().resolution.reason == FRESH

    time.sleep(0.15)

    resolution = client.snapshot().resolution
    assert resolution.reason == STALE
    assert resolution.age_seconds > 0.1


def test_client__console_keeps_failing__polls_back_off(console, make_client):
    console.modes["config"] = ERROR_500
    client = make_client(console.url, poll_interval=0.01, backoff_initial=0.05, backoff_max=0.4)

    client.start()
    time.sleep(1.0)

    # Without backoff a 10 ms poll would ask ~100 times; 0.05 → 0.4 s doubling is a handful.
    assert 3 <= len(console.config_requests) <= 10


def test_backoff_delay__consecutive_failures__doubles_with_jitter_up_to_cap():
    rng = random.Random(7)
    delays = [[backoff_delay(n, 1.0, 30.0, rng) for _ in range(200)] for n in range(1, 8)]

    for n, samples in enumerate(delays, start=1):
        step = min(30.0, 2 ** (n - 1))
        assert all(step / 2 <= d <= step for d in samples)
        assert max(samples) - min(samples) > step / 4  # jittered, not constant
    assert max(delays[-1]) <= 30.0


# ---------------------------------------------------------------- start without the console


def test_client__console_down_at_start__starts_from_disk_copy_as_cached(
    console, make_client, tmp_path
):
    cache = tmp_path / "cache.json"
    first = make_client(console.url, cache_path=cache)
    first.start(wait=2.0)
    first.stop()
    good_etag = console.etag
    console.close()

    client = make_client(dead_url(), cache_path=cache)

    assert client.ready  # before any network call
    snap = client.snapshot()
    assert snap.etag == good_etag
    assert snap.strategy(STRATEGY).version == 3
    assert snap.resolution.reason == CACHED
    assert snap.resolution.fallback is True
    assert 0 <= snap.resolution.age_seconds < 5
    client.start(wait=1.0)
    assert client.snapshot().resolution.reason == CACHED
    assert client.status()["source"] == "disk"
    assert "cannot reach the console" in client.status()["last_error"]


def test_client__console_down_and_no_disk_copy__starts_from_bootstrap(make_client, tmp_path):
    bootstrap = tmp_path / "bootstrap.json"
    bootstrap.write_text(json.dumps({**PAYLOAD, "etag": '"r1-boot"'}))

    client = make_client(dead_url(), bootstrap_path=bootstrap)
    client.start(wait=1.0)

    snap = client.snapshot()
    assert client.ready
    assert snap.etag == '"r1-boot"'
    assert snap.strategy(STRATEGY).version == 3
    assert snap.resolution == Resolution(BOOTSTRAP, None, True)
    assert client.status()["source"] == "bootstrap"


def test_client__disk_copy_corrupt__falls_back_to_bootstrap(make_client, tmp_path):
    cache = tmp_path / "cache.json"
    cache.write_bytes(b'{"format": "context_runtime.config_cache/1", "payl')
    bootstrap = tmp_path / "bootstrap.json"
    bootstrap.write_text(json.dumps({**PAYLOAD, "etag": '"r1-boot"'}))

    client = make_client(dead_url(), cache_path=cache, bootstrap_path=bootstrap)

    assert client.snapshot().resolution.reason == BOOTSTRAP


def test_client__no_good_copy_anywhere__not_ready_and_reason_error(make_client, tmp_path):
    bootstrap = tmp_path / "bootstrap.json"
    invalid = copy.deepcopy(PAYLOAD)
    invalid["strategies"][STRATEGY]["body"]["budget"] = "lots"
    bootstrap.write_text(json.dumps({**invalid, "etag": '"r1-boot"'}))

    client = make_client(dead_url(), bootstrap_path=bootstrap)
    client.start(wait=1.0)

    assert not client.ready
    assert not client.wait_ready(0.1)
    snap = client.snapshot()
    assert snap.strategy(STRATEGY) is None
    assert snap.profile is None
    assert snap.resolution == Resolution(ERROR, None, True)
    status = client.status()
    assert status["ready"] is False
    assert status["reason"] == ERROR
    assert "cannot reach the console" in status["last_error"]


def test_client__started_from_bootstrap_then_console_confirms__fresh_and_disk_copy_written(
    console, make_client, tmp_path
):
    bootstrap = tmp_path / "bootstrap.json"
    bootstrap.write_text(json.dumps({**console.payload, "etag": console.etag}))
    cache = tmp_path / "cache.json"

    # One confirmation only (a long poll): what is checked is the first answer's effect.
    client = make_client(console.url, bootstrap_path=bootstrap, cache_path=cache, poll_interval=60)
    assert client.snapshot().resolution.reason == BOOTSTRAP
    client.start(wait=5.0)

    assert wait_for(lambda: client.snapshot().resolution.reason == FRESH, 5.0)
    assert console.config_requests[0] == (console.etag, 304)
    assert wait_for(cache.exists)


# ---------------------------------------------------------------- disk copy


def test_client__new_config__written_to_disk_atomically(console, make_client, tmp_path):
    cache = tmp_path / "state" / "cache.json"
    client = make_client(console.url, cache_path=cache)
    client.start(wait=2.0)

    new_etag = console.publish(**{STRATEGY: strategy_entry(4, 9000)})

    def saved_etag():  # the file is written just after the new copy is served
        return (
            msgspec.json.decode(cache.read_bytes())["payload"]["etag"] if cache.exists() else None
        )

    assert wait_for(lambda: saved_etag() == new_etag)
    saved = msgspec.json.decode(cache.read_bytes())
    assert saved["payload"]["etag"] == new_etag
    assert saved["payload"]["strategies"][STRATEGY]["version"] == 4
    assert sorted(p.name for p in cache.parent.iterdir()) == ["cache.json"]  # no temp files


def test_client__disk_copy_of_another_agent__not_used(console, make_client, tmp_path):
    cache = tmp_path / "cache.json"
    other = {**PAYLOAD, "agent": "someone_else", "etag": '"r9-aaaa"'}
    cache.write_text(json.dumps(other))

    client = make_client(dead_url(), cache_path=cache)

    assert not client.ready


# ---------------------------------------------------------------- what counts as valid


def test_client__unknown_fields_and_runtime_own_sections__accepted(console, make_client):
    def newer_console(payload):
        payload["strategies"][STRATEGY]["body"]["future_field"] = {"x": 1}
        payload["profile"]["body"]["sections"]["user_context"]["our_own_section"] = True
        payload["profile"]["body"]["switches"]["our.own.switch"] = "on"
        payload["new_envelope_field"] = 1

    new_etag = console.publish(newer_console)
    client = make_client(console.url)
    client.start(wait=2.0)

    assert client.snapshot().etag == new_etag
    assert client.snapshot().strategy(STRATEGY).body["future_field"] == {"x": 1}


def test_client__payload_of_another_agent__rejected(console, make_client):
    console.publish(lambda payload: payload.update(agent="someone_else"))
    client = make_client(console.url)

    client.start(wait=2.0)

    assert not client.ready
    assert "someone_else" in client.status()["last_error"]


def test_validate_config_payload__envelope_and_bodies__findings_with_paths():
    bad = copy.deepcopy({**PAYLOAD, "etag": '"r1-x"'})
    bad["profile"] = {"version": "7", "body": {"sections": []}}
    bad["shadow"] = {STRATEGY: {"version": 4}}
    del bad["strategies"]

    paths = [f.path for f in validate_config_payload(bad, agent=AGENT, environment="uat")]

    assert paths == [
        "environment",
        "profile.version",
        "profile.body.sections",
        "strategies",
        f"shadow.{STRATEGY}.body",
    ]


def test_client__served_bodies__read_only_but_copyable(console, make_client):
    client = make_client(console.url)
    client.start(wait=2.0)
    body = client.snapshot().strategy(STRATEGY).body

    with pytest.raises(TypeError):
        body["budget"]["max_input_tokens"] = 1
    with pytest.raises(TypeError):
        body["required"].append("more")
    mutable = copy.deepcopy(body)
    mutable["required"].append("more")
    assert isinstance(body, dict)
    assert json.loads(json.dumps(body)) == PAYLOAD["strategies"][STRATEGY]["body"]


def test_client__snapshot__immutable(console, make_client):
    client = make_client(console.url)
    client.start(wait=2.0)

    with pytest.raises(AttributeError):
        client.snapshot().etag = "x"


# ---------------------------------------------------------------- resolution on the trace


def test_resolution__trace_fields__contract_boolean_plus_reason_and_age():
    assert Resolution(STALE, 12.34567, True).trace_fields() == {
        "config_fallback": True,
        "config_resolution": "stale",
        "config_age_seconds": 12.346,
    }
    assert Resolution(BOOTSTRAP, None, True).trace_fields()["config_age_seconds"] is None
    assert Resolution(FRESH, 0.5, False).trace_fields()["config_fallback"] is False

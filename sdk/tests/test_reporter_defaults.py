"""Issue 32, items 1 and 2: the reporter is durable without any setting, and an outcome
reported as the README shows (right after the answer, with a token covering several agents)
is stored, not rejected; a rejection that still happens is counted and said once."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import msgspec
from context_runtime.client import ConfigClient
from context_runtime.manifest_report import Registry, report_manifest
from context_runtime.reporter import TraceReporter, default_spool_dir
from fake_console import AGENT, ERROR_500, OK, PATIENT, TOKEN, FakeConsole
from test_reporter import trace, wait_for

FAST = {
    "flush_interval": 0.02,
    "timeout": PATIENT,
    "backoff_initial": 0.02,
    "backoff_max": 0.1,
    "close_at_exit": False,
}


# ---------------------------------------------------------------- durable by default


def test_default__console_down_then_a_new_process__traces_survive_without_any_setting(
    console, reporters, state_home
):
    """What the issue measured: SDK defaults, SIGTERM-like close during an outage. Before,
    "24 traces dropped: shutdown"; now they wait on disk for the next process."""
    console.modes["traces"] = ERROR_500
    first = TraceReporter(console.url, TOKEN, **FAST)
    reporters.append(first)
    for i in range(20):
        assert first.report(trace(i))
    first.close(timeout=0.2)  # the console is still down: nothing is lost, it stays spooled
    assert first.stats()["dropped"] == 0
    assert first.status()["spool"] == "disk"
    where = Path(first.spool_dir)
    assert where.is_relative_to(state_home / "context-console")
    assert stat.S_IMODE(where.stat().st_mode) == 0o700

    console.modes["traces"] = OK
    second = TraceReporter(console.url, TOKEN, **FAST)
    reporters.append(second)
    assert second.spool_dir == first.spool_dir  # the same runtime finds its own directory
    assert wait_for(lambda: second.stats()["recovered"] == 20, timeout=8.0)
    assert second.flush(timeout=5.0)
    assert sorted(console.stored) == sorted(f"req-{i}" for i in range(20))


def test_default__spool_dir_none__memory_only_as_before(console, reporters, state_home):
    reporter = TraceReporter(console.url, TOKEN, spool_dir=None, **FAST)
    reporters.append(reporter)
    assert reporter.spool_dir is None
    assert reporter.status()["spool"] == "off"
    assert not (state_home / "context-console").exists()


def test_default__other_token_or_console__another_directory(state_home):
    one = default_spool_dir("https://console.example.com", "cc_rt_one")
    assert one == default_spool_dir("https://console.example.com/", "cc_rt_one")
    assert one != default_spool_dir("https://console.example.com", "cc_rt_two")
    assert one != default_spool_dir("https://other.example.com:8443", "cc_rt_one")
    assert "cc_rt_one" not in one  # a fingerprint, never the token
    assert Path(one).parts[-4:-2] == ("context-console", "console.example.com")


def test_for_client__spools_beside_the_config_cache(console, reporters, tmp_path):
    cache = tmp_path / "runtime" / "console-config.json"
    client = ConfigClient(console.url, TOKEN, AGENT, cache_path=cache, stream=False)
    reporter = TraceReporter.for_client(client, **FAST)
    reporters.append(reporter)
    assert reporter.spool_dir == f"{cache}.spool"
    assert reporter.report(trace(1))
    assert reporter.flush(timeout=5.0)
    assert "req-1" in console.stored
    assert reporter.stats()["spool"] == "disk"


def test_default__directory_unusable__said_once_memory_fallback_never_a_crash(
    console, reporters, tmp_path, monkeypatch, caplog
):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the state directory should be")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    with caplog.at_level(logging.WARNING, logger="context_runtime.reporter"):
        reporter = TraceReporter(console.url, TOKEN, **FAST)
        reporters.append(reporter)
        assert reporter.report(trace(1))
        assert reporter.report(trace(2))
        assert reporter.flush(timeout=5.0)
    assert sorted(console.stored) == ["req-1", "req-2"]
    assert reporter.status()["spool"] == "memory"
    said = [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
    assert len(said) == 1 and str(blocked) in said[0] and "memory" in said[0]


def test_default__no_home_directory__memory_with_a_warning(console, reporters, monkeypatch, caplog):
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # "~" cannot be resolved
    with caplog.at_level(logging.WARNING, logger="context_runtime.reporter"):
        reporter = TraceReporter(console.url, TOKEN, **FAST)
        reporters.append(reporter)
    assert reporter.spool_dir is None
    assert any("No directory for the trace spool" in r.getMessage() for r in caplog.records)
    assert reporter.report(trace(1)) and reporter.flush(timeout=5.0)
    assert "req-1" in console.stored


# ---------------------------------------------------------------- outcomes name their agent


def test_report_outcome__right_after_the_answer_with_a_several_agents_token__stored_with_agent(
    reporters,
):
    """The issue's 42 of 44: the trace is not stored yet when the outcome arrives, and the
    token covers several agents. The reporter knows the agent of the trace it was given."""
    console = FakeConsole()
    try:
        console.token_covers_several_agents = True
        console.modes["traces"] = ERROR_500  # the trace has not landed when the outcome does
        reporter = TraceReporter(console.url, TOKEN, spool_dir=None, **FAST)
        reporters.append(reporter)
        for i in range(10):
            reporter.report(trace(i))
            reporter.report_outcome(f"req-{i}", "task_completed", True)
        assert reporter.flush(timeout=5.0) is False  # the traces wait for the console
        assert reporter._outcomes.flush(timeout=5.0)
        assert len(console.outcomes) == 10
        assert set(console.outcome_agents.values()) == {AGENT}
        assert reporter.stats()["outcomes_rejected"] == 0
    finally:
        console.close()


def test_report_outcome__rejections_counted_top_level_and_logged_once_per_reason(reporters, caplog):
    console = FakeConsole()
    try:
        console.token_covers_several_agents = True
        reporter = TraceReporter(console.url, TOKEN, spool_dir=None, **FAST)
        reporters.append(reporter)
        with caplog.at_level(logging.WARNING, logger="context_runtime.reporter"):
            for i in range(40):  # requests this process never reported: no agent known
                reporter.report_outcome(f"other-{i}", "task_completed", True)
                reporter.flush(timeout=5.0)  # one batch each: the reason is said once anyway
            assert reporter.flush(timeout=5.0)
        stats = reporter.stats()
        assert stats["outcomes_rejected"] == 40
        assert stats["outcomes"]["rejected"] == 40
        assert reporter.status()["outcomes_rejected"] == 40
        lines = [r.getMessage() for r in caplog.records if "rejected outcome" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "name the agent" in lines[0]
    finally:
        console.close()


# ---------------------------------------------------------------- the runtime's name


def test_heartbeat__no_runtime_name__the_manifest_reports_name_is_used(console):
    """Issue 32, item 7: the name given to the manifest report reaches the Runtimes card."""
    registry = Registry()
    registry.register_provider("task_state", lambda request: None)
    token = "cc_rt_named-runtime-token"
    console.token = token
    assert report_manifest(console.url, token, registry, "checkout-agent 1.4", attempts=1)
    unnamed = ConfigClient(console.url, token, AGENT, stream=False, heartbeat_interval=None)
    named = ConfigClient(
        console.url, token, AGENT, stream=False, heartbeat_interval=None, runtime_name="own"
    )
    try:
        assert unnamed.send_heartbeat(timeout=PATIENT)
        assert named.send_heartbeat(timeout=PATIENT)
    finally:
        unnamed.stop(timeout=0.5)
        named.stop(timeout=0.5)
    assert [b.get("runtime") for b in console.heartbeats] == ["checkout-agent 1.4", "own"]


def test_report_outcome__value_that_cannot_be_encoded__false_and_counted_rejected(
    console, reporters
):
    reporter = TraceReporter(console.url, TOKEN, spool_dir=None, **FAST)
    reporters.append(reporter)
    assert reporter.report_outcome("req-1", "rating", object()) is False  # never raises
    assert reporter.stats()["outcomes_rejected"] == 1


def test_report__same_mistake_at_other_positions__one_log_line_every_one_counted(
    console, reporters, caplog
):
    good = {"id": "task_state:T1", "source": "task_state", "decision": "selected", "reason": ""}
    bad = {**good, "id": "x", "decision": "perhaps"}
    reporter = TraceReporter(console.url, TOKEN, spool_dir=None, validate=False, **FAST)
    reporters.append(reporter)
    with caplog.at_level(logging.WARNING, logger="context_runtime.reporter"):
        for i in range(6):  # the bad candidate at position 0, 1, 2, 0, 1, 2
            wire = msgspec.json.decode(msgspec.json.encode(trace(i)))
            wire["candidates"] = [good] * (i % 3) + [bad]
            assert reporter.report(wire)
        assert reporter.flush(timeout=5.0)
    assert reporter.stats()["rejected"] == 6
    lines = [r.getMessage() for r in caplog.records if "rejected trace" in r.getMessage()]
    assert len(lines) == 1, lines


# ---------------------------------------------------------------- the ingest server apart


def test_ingest_url__traces_and_outcomes_go_there__config_console_gets_none(reporters):
    """A console serving ingest on its own port (make run's INGEST_PORT): the reporter sends
    its batches there, and the config console sees none of them."""
    config_console, ingest_console = FakeConsole(), FakeConsole()
    try:
        reporter = TraceReporter(
            config_console.url, TOKEN, ingest_url=ingest_console.url, spool_dir=None, **FAST
        )
        reporters.append(reporter)
        assert reporter.ingest_url == ingest_console.url
        for i in range(3):
            reporter.report(trace(i))
        reporter.report_outcome("req-0", "task_completed", True)
        assert reporter.flush(timeout=5.0) and reporter._outcomes.flush(timeout=5.0)
        assert sorted(ingest_console.stored) == ["req-0", "req-1", "req-2"]
        assert len(ingest_console.outcomes) == 1
        assert config_console.trace_posts == [] and config_console.outcomes == {}
    finally:
        config_console.close()
        ingest_console.close()


def test_ingest_url__from_the_environment__else_the_console_as_before(console, monkeypatch):
    monkeypatch.setenv("CONTEXT_CONSOLE_INGEST_URL", "http://ingest.example:8002")
    assert TraceReporter(console.url, TOKEN, spool_dir=None, **FAST).ingest_url == (
        "http://ingest.example:8002"
    )
    monkeypatch.delenv("CONTEXT_CONSOLE_INGEST_URL")
    assert TraceReporter(console.url, TOKEN, spool_dir=None, **FAST).ingest_url == console.url


def test_ingest_busy__503_with_retry_after__retried_then_stored(console, reporters):
    """The main web server's ingest bound answers 503 with Retry-After when full: the
    reporter waits and sends again, nothing is lost."""
    console.fail_next["traces"] = [503, 503]
    reporter = TraceReporter(console.url, TOKEN, spool_dir=None, **FAST)
    reporters.append(reporter)
    reporter.report(trace(1))
    assert reporter.flush(timeout=10.0)
    assert list(console.stored) == ["req-1"]
    assert reporter.stats()["retries"] == 2

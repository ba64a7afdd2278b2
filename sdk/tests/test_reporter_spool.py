"""The reporter's durable spool (issue 21.1): traces survive SIGTERM, kill -9 and restarts,
are delivered once the console is back, and every one is stored exactly once; the spool is
bounded, a failing disk degrades to memory loudly, a corrupt record is skipped."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from context_runtime import _spool
from context_runtime import reporter as reporter_module
from context_runtime.reporter import TraceReporter
from fake_console import ERROR_500, OK, PATIENT, TOKEN, UNAUTHORIZED, FakeConsole, dead_url
from test_reporter import trace, wait_for

RUNTIME = Path(__file__).with_name("spool_runtime.py")


@pytest.fixture
def make_reporter(reporters, tmp_path):
    def make(url, **options):
        settings = {
            "batch_size": 100,
            "flush_interval": 0.02,
            "timeout": PATIENT,
            "backoff_initial": 0.02,
            "backoff_max": 0.1,
            "close_at_exit": False,
            "spool_dir": tmp_path / "spool",
        }
        settings.update(options)
        reporter = TraceReporter(url, TOKEN, **settings)
        reporters.append(reporter)
        return reporter

    return make


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.spool"))


def posted_twice(console: FakeConsole) -> list[str]:
    ids = [
        rid for post in console.trace_posts if post["status"] == 200 for rid in post["request_ids"]
    ]
    return sorted({rid for rid in ids if ids.count(rid) > 1})


# ---------------------------------------------------------------- delivering


def test_spool__console_up__delivers_all_and_leaves_no_segment(console, make_reporter, tmp_path):
    reporter = make_reporter(console.url)

    assert all(reporter.report(trace(i)) for i in range(250))

    assert reporter.flush(timeout=5.0)
    assert sorted(console.stored) == sorted(f"req-{i}" for i in range(250))
    assert wait_for(lambda: segments(tmp_path / "spool") == [])
    stats = reporter.stats()
    assert (stats["spool"], stats["delivered"], stats["dropped"]) == ("disk", 250, 0)


def test_spool__console_down_then_new_process__delivers_spooled_exactly_once(
    console, make_reporter, tmp_path
):
    console.modes["traces"] = ERROR_500
    first = make_reporter(console.url)
    for i in range(300):
        first.report(trace(i))
    assert wait_for(lambda: first.stats()["retries"] >= 1)
    assert first.close(timeout=0.2)  # nothing dropped: it stays on disk
    assert segments(tmp_path / "spool")

    console.modes["traces"] = OK
    second = make_reporter(console.url)
    assert wait_for(lambda: second.stats()["recovered"] == 300, timeout=8.0)

    assert second.flush(timeout=5.0)
    assert sorted(console.stored) == sorted(f"req-{i}" for i in range(300))
    assert posted_twice(console) == []
    assert wait_for(lambda: segments(tmp_path / "spool") == [])


def test_spool__two_live_reporters_on_one_directory__never_send_a_trace_twice(
    console, make_reporter
):
    console.modes["traces"] = ERROR_500
    left = make_reporter(console.url, spool_segment_bytes=4096, spool_max_bytes=1 << 24)
    for i in range(400):
        left.report(trace(i))
    left.close(timeout=0.1)
    console.modes["traces"] = OK

    one, two = make_reporter(console.url), make_reporter(console.url)
    assert wait_for(lambda: len(console.stored) == 400, timeout=10.0)

    assert posted_twice(console) == []
    assert one.stats()["recovered"] + two.stats()["recovered"] == 400


# ---------------------------------------------------------------- processes killed


def start_runtime(url, spool, prefix, count, *args):
    return subprocess.Popen(
        [sys.executable, str(RUNTIME), url, str(spool), prefix, str(count), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def reported(process, until: int) -> list[str]:
    """Read ``R <id>`` lines until ``until`` of them (or the end)."""
    ids = []
    for line in process.stdout:
        if line.startswith("R "):
            ids.append(line[2:].strip())
            if len(ids) >= until:
                break
    return ids


def test_spool__sigterm_and_sigkill_mid_stream_during_outage__every_trace_stored_once(tmp_path):
    spool = tmp_path / "spool"
    url = dead_url()  # the console is down; it comes back on this port
    port = int(url.rsplit(":", 1)[1])
    accepted: dict[str, list[str]] = {}
    for prefix, how in (("term", signal.SIGTERM), ("kill", signal.SIGKILL)):
        process = start_runtime(url, spool, prefix, 100_000, "--pause", "0.0005")
        ids = reported(process, until=300)
        process.send_signal(how)
        ids += [line[2:].strip() for line in process.stdout if line.startswith("R ")]
        process.wait(10)
        accepted[prefix] = ids
    calm = start_runtime(url, spool, "calm", 200)  # closes normally; the rest stays spooled
    accepted["calm"] = reported(calm, until=200)
    calm.wait(20)
    assert segments(spool)

    console = FakeConsole(port=port)
    try:
        drain = start_runtime(
            console.url, spool, "after", 50, "--drain", "30", "--timeout", str(PATIENT)
        )
        out, err = drain.communicate(timeout=60)
        accepted["after"] = [line[2:] for line in out.splitlines() if line.startswith("R ")]

        expected = {rid for ids in accepted.values() for rid in ids}
        stored = set(console.stored)
        assert expected <= stored, sorted(expected - stored)[:5]
        # A trace spooled by a killed process after its last printed line is stored too.
        assert len(stored - expected) <= 2
        assert posted_twice(console) == []
        assert len(accepted["term"]) >= 300 and len(accepted["kill"]) >= 300
        assert segments(spool) == []
    finally:
        console.close()


# ---------------------------------------------------------------- bounds and bad disks


def test_spool__full__drops_oldest_and_counts(console, make_reporter, tmp_path):
    console.modes["traces"] = ERROR_500
    one = len(_spool.encode_record("req-0", reporter_module.encode_trace(trace(0))))
    reporter = make_reporter(
        console.url, spool_segment_bytes=10 * one, spool_max_bytes=40 * one, backoff_max=5.0
    )

    for i in range(200):
        assert reporter.report(trace(i))

    stats = reporter.stats()
    assert stats["spool_bytes"] <= 40 * one + 100 * one  # plus the batch in flight
    assert stats["dropped"] >= 200 - 40 - 100  # all but the newest 40 and one batch in flight
    assert stats["spool_dropped_oldest"] == stats["dropped"]
    console.modes["traces"] = OK
    reporter.backoff_max = 0.1
    assert reporter.flush(timeout=10.0)
    assert "req-199" in console.stored  # the newest are kept
    assert len(console.stored) + stats["dropped"] == 200


def test_spool__directory_unusable__memory_with_loud_status(
    console, make_reporter, tmp_path, caplog
):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")

    reporter = make_reporter(console.url, spool_dir=blocker / "spool")
    assert reporter.report(trace(1))

    assert reporter.flush(timeout=3.0)
    assert "req-1" in console.stored
    status = reporter.status()
    assert (status["state"], status["spool"]) == ("spool_degraded", "memory")
    assert "NotADirectoryError" in status["spool_error"]
    assert caplog.text.count("traces are kept in memory only") == 1


def test_spool__disk_full_then_free__degrades_once_and_recovers(
    console, make_reporter, monkeypatch, caplog
):
    monkeypatch.setattr(reporter_module, "_SPOOL_RETRY_SECONDS", 0.05)
    reporter = make_reporter(console.url)
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_spool.os, "write", full)
    for i in range(5):
        assert reporter.report(trace(i))  # never raises into the runtime
    assert reporter.status()["spool"] == "memory"
    assert caplog.text.count("is full") == 1

    monkeypatch.setattr(_spool.os, "write", real_write)
    assert wait_for(lambda: reporter.status()["spool"] == "disk")
    reporter.report(trace(5))

    assert reporter.flush(timeout=3.0)
    assert sorted(console.stored) == sorted(f"req-{i}" for i in range(6))


def test_spool__corrupt_record_and_torn_tail__skipped_reported_rest_delivered(
    console, make_reporter, tmp_path, caplog
):
    spool = tmp_path / "spool"
    spool.mkdir()
    records = [
        _spool.encode_record(f"req-{i}", reporter_module.encode_trace(trace(i))) for i in range(5)
    ]
    broken = bytearray(records[2])
    broken[len(broken) // 2] ^= 0xFF  # a flipped byte: the checksum fails
    data = records[0] + records[1] + bytes(broken) + records[3] + records[4] + records[0][:20]
    (spool / "00000000000000000001-1-000001.spool").write_bytes(data)
    caplog.set_level(logging.WARNING, logger="context_runtime.reporter")

    reporter = make_reporter(console.url)

    assert wait_for(lambda: len(console.stored) == 4, timeout=8.0)
    assert sorted(console.stored) == ["req-0", "req-1", "req-3", "req-4"]
    info = reporter.stats()
    assert (info["spool_corrupt_records"], info["spool_corrupt_files"]) == (2, 1)
    assert "corrupt record" in caplog.text
    assert wait_for(lambda: segments(spool) == [])


# ---------------------------------------------------------------- a shared directory

NOBODY = 65534  # another local user: only root may give a file away (CI runs as root)
GIVES_FILES_AWAY = os.geteuid() == 0


def test_spool__segments_planted_by_others_in_a_shared_directory__refused_not_sent(
    console, make_reporter, tmp_path, caplog
):
    # Given a spool in a directory every local user may write (like /tmp), where someone
    # planted segments: one of another user, one of ours that anyone may write, a symbolic
    # link and a second name (hard link) of a file of ours, each with a trace to smuggle
    spool = tmp_path / "spool"
    spool.mkdir()
    spool.chmod(0o1777)
    outside = tmp_path / "outside"
    outside.mkdir()

    def segment(path: Path, request_id: str) -> Path:
        data = reporter_module.encode_trace(trace(0, request_id=request_id))
        path.write_bytes(_spool.encode_record(request_id, data))
        path.chmod(0o600)
        return path

    name = "0000000000000000000{}-4242-000001.spool".format
    if GIVES_FILES_AWAY:  # a developer's non-root run stages the other three
        os.chown(segment(spool / name(1), "planted-by-another-user"), NOBODY, NOBODY)
    segment(spool / name(2), "planted-writable-by-all").chmod(0o666)
    (spool / name(3)).symlink_to(segment(outside / "linked", "planted-symlink"))
    os.link(segment(outside / "linked-hard", "planted-hard-link"), spool / name(4))
    # and a segment an earlier run of this runtime left behind
    segment(spool / name(5), "left-by-an-earlier-run")
    caplog.set_level(logging.WARNING, logger="context_runtime.reporter")

    # When the runtime starts its reporter there and reports a trace
    reporter = make_reporter(console.url, spool_dir=spool)
    reporter.report(trace(1, request_id="reported-now"))

    # Then only this user's own segments are delivered with the runtime's token
    assert wait_for(lambda: len(console.stored) == 2, timeout=8.0), console.stored
    assert reporter.flush(timeout=5.0)
    assert sorted(console.stored) == ["left-by-an-earlier-run", "reported-now"]
    assert not any(rid.startswith("planted") for rid in console.posted_request_ids())
    # and the planted files are refused, counted, named in the log once, and left alone
    planted = [(2, "writable by others"), (3, "a symbolic link"), (4, "2 names")]
    if GIVES_FILES_AWAY:
        planted.append((1, "owned by uid 65534"))
    assert reporter.stats()["spool_refused_files"] == len(planted)
    for number, why in planted:
        assert caplog.text.count(f"{name(number)} is not this user's segment ({why}") == 1
        assert os.path.lexists(spool / name(number))
    # and the shared directory itself is named as one to move away from
    assert "is writable by other users" in caplog.text


# ---------------------------------------------------------------- a token refused


def test_spool__token_revoked__unauthorized_status_traces_spooled_not_retried_hot(
    console, make_reporter
):
    console.modes["traces"] = UNAUTHORIZED
    reporter = make_reporter(console.url, auth_retry_interval=0.5)
    for i in range(20):
        reporter.report(trace(i))

    assert wait_for(lambda: reporter.status()["state"] == "unauthorized")
    posts = len(console.trace_posts)
    time.sleep(0.3)
    assert len(console.trace_posts) - posts <= 1  # not hot: one try per auth_retry_interval
    assert reporter.stats()["spool_unread"] + reporter.stats()["pending"] >= 20
    assert reporter.status()["unauthorized"] is True

    console.modes["traces"] = OK
    assert reporter.flush(timeout=5.0)
    assert len(console.stored) == 20
    assert reporter.status()["state"] == "ok"

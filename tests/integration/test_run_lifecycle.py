"""Starting and stopping `scripts/run.py` the way a new user does (issue 12, items 1–4).

One data directory, four starts of the run command in a subprocess with the embedded engines
(no DATABASE_URL / REDIS_URL), on a free port:

1. fresh start → the banner comes last with logins, token and a curl hint on the real address;
   it serves; a second start on the same port is refused with one line; Ctrl-C stops every
   child and the embedded PostgreSQL and Redis;
2. start again → the same demo token, the same data (a manifest version written through the
   API in run 1); kill -9 of the run command's process group → the watchdog stops the rest;
3. start again → the same token; then everything of the clone is SIGKILLed at once (engines
   and watchdog included) and pgserver's handle file is emptied, as an abrupt stop leaves it;
4. start again over those stale handle/pid/socket files → the same token and data; Ctrl-C →
   nothing left running.

Run them alone with `pytest -m lifecycle -s` (the phase timings are printed). The last test
is the demo token's rule itself, on the test database.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BANNER_END = "Press Ctrl-C to stop everything"
TOKEN = re.compile(r"^\s+(cc_rt_[A-Za-z0-9_-]+)\s*$", re.MULTILINE)


def free_port() -> int:
    """A free port whose next two are free too: `make run` puts the stream server on the web
    port + 1 (STREAM_PORT) and the ingest server on + 2 (INGEST_PORT), so all three must be
    free or the start is refused."""
    for _ in range(50):
        with socket.socket() as web, socket.socket() as stream, socket.socket() as ingest:
            web.bind(("127.0.0.1", 0))
            port = web.getsockname()[1]
            try:
                stream.bind(("127.0.0.1", port + 1))
                ingest.bind(("127.0.0.1", port + 2))
            except OSError:
                continue
            return port
    raise RuntimeError("no three free ports in a row on 127.0.0.1")


class Run:
    """One start of scripts/run.py in its own session (its process group: the terminal's)."""

    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, "scripts/run.py"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert self.proc.poll() is None or text in self.output, (
                f"run.py exited ({self.proc.returncode}) before {text!r}:\n{self.output}"
            )
            assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n{self.output}"
            time.sleep(0.3)
        return self.output

    def banner(self, timeout: float = 300) -> tuple[str, str]:
        """(the banner text, the demo token printed in it)."""
        output = self.wait_for(BANNER_END, timeout)
        banner = output[output.rindex("=" * 72, 0, output.index(BANNER_END)) :]
        token = TOKEN.search(banner)
        assert token, banner
        return banner, token.group(1)

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)

    def stop(self, timeout: float = 90) -> int:
        """Ctrl-C: SIGINT to the run command's process group, as a terminal sends it."""
        self.signal_group(signal.SIGINT)
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code


# What a start without VERBOSE prints before the banner (scripts/run.py), line by line.
LAUNCHER_LINES = (
    "Starting the embedded PostgreSQL and Redis",
    "Preparing the database…",
    "Starting the web server, stream server, ingest server, worker and beat…",
)


def quiet_start_faults(output: str) -> list[str]:
    """The lines of a start's log before its banner that are not the launcher's own."""
    before = output[: output.index("=" * 72)]
    return [
        line for line in before.splitlines() if line.strip() and not line.startswith(LAUNCHER_LINES)
    ]


def clone_processes(data_dir: Path, port: int) -> list[tuple[int, str]]:
    """Processes of this clone: started with its data directory in their environment (every
    child of run.py, the engines included) or naming the data directory or port."""
    found = []
    marker, port_marks = str(data_dir), (f"--port {port}", f":{port}")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            environ = (entry / "environ").read_bytes().decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z":
            continue
        if (
            f"CONSOLE_DATA_DIR={marker}\0" in environ
            or marker in cmdline
            or any(mark in cmdline for mark in port_marks)
        ):
            found.append((int(entry.name), cmdline))
    return found


def wait_none_left(data_dir: Path, port: int, timeout: float) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while (left := clone_processes(data_dir, port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def kill_everything(data_dir: Path, port: int) -> None:
    for pid, _ in clone_processes(data_dir, port):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def http(method: str, url: str, token: str | None = None, body: dict | None = None):
    request = urllib.request.Request(url, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, data=data, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def manifest(extra_tool: str) -> dict:
    from console.demo.data import DEMO_MANIFEST

    body = copy.deepcopy(DEMO_MANIFEST)
    body["tools"] = [*body["tools"], extra_tool]
    return body


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.fixture
def clone(tmp_path_factory):
    """A data directory and a free port for the run command; afterwards nothing of it runs."""
    data_dir = tmp_path_factory.mktemp("lifecycle")
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "CONSOLE_DEMO_TOKEN_FILE", "VERBOSE", "LOG_LEVEL"}
    }
    env.update(CONSOLE_DATA_DIR=str(data_dir), CONSOLE_ENV="development")
    env.update(HOST="127.0.0.1", PORT=str(port), WEB_WORKERS="2", WORKER_CONCURRENCY="1")
    runs: list[Run] = []
    try:
        yield env, data_dir, port, runs
    finally:
        for run in runs:
            run.signal_group(signal.SIGKILL)
        kill_everything(data_dir, port)
        left = wait_none_left(data_dir, port, 10)
        assert not left, left


@pytest.mark.lifecycle
def test_run__stop_start_kill_start__same_token_same_data_nothing_left(clone):
    env, data_dir, port, runs = clone
    url = f"http://127.0.0.1:{port}"
    config = f"{url}/api/v1/runtime/config/assistant_professional"
    timings: dict[str, float] = {}

    def timed(name: str, started: float) -> None:
        timings[name] = round(time.monotonic() - started, 1)

    # 1. A fresh start: the banner last, on the real address; it serves.
    started = time.monotonic()
    first = Run(env)
    runs.append(first)
    banner, token = first.banner()
    timed("fresh start to banner", started)
    assert first.output.rstrip().endswith("=" * 72), "the banner is not the last thing printed"
    # Without VERBOSE, nothing but the launcher's own lines and the banner: no warning the
    # servers give at every start (issue 32.11: Celery's as root, granian's about threads).
    assert quiet_start_faults(first.output) == [], first.output
    assert f"Context Console is running at {url}/" in banner
    assert "ops      / ops-demo" in banner
    assert f"curl -H 'Authorization: Bearer {token}' {config}" in banner
    assert (data_dir / "demo-runtime-token").read_text().strip() == token
    assert (data_dir / "demo-runtime-token").stat().st_mode & 0o777 == 0o600
    assert http("GET", f"{url}/healthz")[0] == 200
    assert http("GET", config, token)[0] == 200
    # Data written through the API: two manifest versions of sg-test.
    status, body = http("PUT", f"{url}/api/v1/runtime/manifest", token, manifest("probe_a"))
    assert status == 200, body
    status, body = http("PUT", f"{url}/api/v1/runtime/manifest", token, manifest("probe_b"))
    assert status == 200, body
    version_b = json.loads(body)["version"]
    page = http("GET", f"{url}/login/")[1].decode()
    assert 'rel="icon"' in page and "favicon.svg" in page
    assert http("GET", f"{url}/static/console/favicon.svg")[0] == 200

    # A second start on the same port while the first runs: one line, nothing started.
    started = time.monotonic()
    second = subprocess.run(
        [sys.executable, "scripts/run.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    timed("second start refused", started)
    lines = [line for line in (second.stdout + second.stderr).splitlines() if line.strip()]
    assert second.returncode != 0
    assert len(lines) == 1 and "already in use" in lines[0], lines
    assert http("GET", config, token)[0] == 200  # the first one still serves

    # Ctrl-C: every child and the embedded engines stop.
    started = time.monotonic()
    assert first.stop() == 0, first.output
    timed("Ctrl-C to exit", started)
    left = wait_none_left(data_dir, port, 3)
    assert not left, f"left running after Ctrl-C: {left}\n{first.output}"
    assert "embedded PostgreSQL and Redis stopped" in first.output
    assert port_free(port)

    # 2. Start again: same token, same data.
    started = time.monotonic()
    again = Run(env)
    runs.append(again)
    _, token_again = again.banner()
    timed("restart to banner", started)
    assert token_again == token
    assert "the same as at the last start" in again.output
    assert http("GET", config, token)[0] == 200
    status, body = http("PUT", f"{url}/api/v1/runtime/manifest", token, manifest("probe_b"))
    assert (status, json.loads(body)["version"]) == (200, version_b), body  # identical: kept

    # kill -9 of the run command's process group: its watchdog stops the rest.
    started = time.monotonic()
    again.signal_group(signal.SIGKILL)
    again.proc.wait(timeout=10)
    left = wait_none_left(data_dir, port, 30)
    timed("kill -9 to nothing left", started)
    assert not left, f"left running after kill -9: {left}"
    assert port_free(port)

    # 3. Start again, then kill everything of the clone at once, engines included: stale
    # pid files, socket files, users and an emptied pgserver handle file stay behind.
    started = time.monotonic()
    third = Run(env)
    runs.append(third)
    assert third.banner()[1] == token
    timed("start after kill -9 to banner", started)
    kill_everything(data_dir, port)
    third.proc.wait(timeout=10)
    assert not wait_none_left(data_dir, port, 10)
    handle = data_dir / "postgres" / ".handle_pids.json"
    assert handle.exists() and (data_dir / "postgres" / "postmaster.pid").exists()
    assert (data_dir / "redis.pid").exists() and (data_dir / "embedded-users.json").exists()
    handle.write_text("")

    # 4. Start over the stale files: same token, same data; Ctrl-C leaves nothing.
    started = time.monotonic()
    last = Run(env)
    runs.append(last)
    assert last.banner()[1] == token
    timed("start over stale files to banner", started)
    assert "Traceback" not in last.output
    assert http("GET", config, token)[0] == 200
    status, body = http("PUT", f"{url}/api/v1/runtime/manifest", token, manifest("probe_b"))
    assert (status, json.loads(body)["version"]) == (200, version_b), body
    started = time.monotonic()
    assert last.stop() == 0, last.output
    timed("last Ctrl-C to exit", started)
    left = wait_none_left(data_dir, port, 3)
    assert not left, f"left running after the last stop: {left}\n{last.output}"
    print("\nlifecycle timings (s):", json.dumps(timings))


@pytest.mark.lifecycle
def test_run__engine_cannot_start__one_line_no_traceback_nothing_left(clone):
    env, data_dir, port, runs = clone
    (data_dir / "postgres").mkdir()
    (data_dir / "postgres" / "PG_VERSION").write_text("not a version\n")

    result = subprocess.run(
        [sys.executable, "scripts/run.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )

    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("cannot start the embedded services:"), (
        result.stdout + result.stderr
    )
    assert not wait_none_left(data_dir, port, 3)


def test_demo_token__secret_in_file__kept_while_active_else_replaced_by_the_system(
    demo_world, tmp_path, monkeypatch
):
    from console.demo import releases
    from console.kernel.models import AuditRecord
    from strategies.catalog.models import Environment
    from strategies.runtime.models import RuntimeToken
    from strategies.runtime.tokens import runtime_token_revoke

    token_file = tmp_path / "demo-runtime-token"
    monkeypatch.setenv("CONSOLE_DEMO_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("HOST", "0.0.0.0")
    monkeypatch.setenv("PORT", "8123")
    sg_test = Environment.objects.get(key="sg-test")
    active = RuntimeToken.objects.filter(name=releases.DEMO_TOKEN_NAME, revoked_at__isnull=True)
    loaded = active.get()  # load_demo without a file made one; its secret is nowhere

    first, secret, reused = releases.demo_token(sg_test, token_file=token_file)
    assert (reused, first.pk != loaded.pk, active.get().pk) == (False, True, first.pk)
    assert token_file.read_text().strip() == secret
    assert token_file.stat().st_mode & 0o777 == 0o600

    again, secret_again, reused = releases.demo_token(sg_test, token_file=token_file)
    assert (again.pk, secret_again, reused) == (first.pk, secret, True)
    lines = releases.demo_token_lines(again, secret_again, reused=True)
    assert "the same as at the last start" in lines
    assert f"Bearer {secret}' http://127.0.0.1:8123/api/v1/runtime/config/" in lines

    runtime_token_revoke(token=again, actor=None, reason="test")
    replaced, new_secret, reused = releases.demo_token(sg_test, token_file=token_file)
    assert (reused, replaced.pk != first.pk, new_secret != secret) == (False, True, True)
    assert token_file.read_text().strip() == new_secret
    assert active.count() == 1

    token_rows = AuditRecord.objects.filter(
        action__startswith="runtime_token.", target_type__icontains="token"
    )
    demo_rows = [r for r in token_rows if releases.DEMO_TOKEN_NAME in r.target_label]
    assert demo_rows and {r.actor_type for r in demo_rows} == {"system"}

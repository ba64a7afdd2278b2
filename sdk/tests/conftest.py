"""Fixtures shared by the SDK's tests (they run without Django or the console)."""

from __future__ import annotations

import pytest
from context_runtime.client import ConfigClient
from context_runtime.reporter import TraceReporter
from fake_console import AGENT, TOKEN, FakeConsole


@pytest.fixture
def reporters():
    """Every TraceReporter a test appends, closed after it."""
    made: list[TraceReporter] = []
    yield made
    for reporter in made:
        reporter.close(timeout=0.2)


@pytest.fixture(autouse=True)
def state_home(tmp_path_factory, monkeypatch):
    """The reporter spools by default in the user's state directory: each test gets its own
    (never the machine's ~/.local/state)."""
    home = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


@pytest.fixture
def console(request):
    """A fresh fake console on loopback (fake_console.py), closed after the test. It serves
    the test module's ``CONSOLE_PAYLOAD`` when the module sets one, else the contract's
    example payload."""
    fake = FakeConsole(getattr(request.module, "CONSOLE_PAYLOAD", None))
    yield fake
    fake.close()


@pytest.fixture
def config():
    """``config(payload)``: a started ConfigClient against a fresh fake console serving
    ``payload``; both closed after the test."""
    opened = []

    def start(payload: dict) -> ConfigClient:
        console = FakeConsole(payload)
        client = ConfigClient(console.url, TOKEN, AGENT, poll_interval=30.0, timeout=2.0)
        opened.append((console, client))
        assert client.start(wait=5.0), "the config client did not get the fake console's config"
        return client

    yield start
    for console, client in opened:
        client.stop()
        console.close()

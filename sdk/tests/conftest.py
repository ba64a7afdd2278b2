"""Fixtures shared by the SDK's tests (they run without Django or the console)."""

from __future__ import annotations

import pytest
from fake_console import FakeConsole


@pytest.fixture
def console(request):
    """A fresh fake console on loopback (fake_console.py), closed after the test. It serves
    the test module's ``CONSOLE_PAYLOAD`` when the module sets one, else the contract's
    example payload."""
    fake = FakeConsole(getattr(request.module, "CONSOLE_PAYLOAD", None))
    yield fake
    fake.close()

"""The fake console itself (fake_console.py): what the SDK's I/O tests lean on holds."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import msgspec
from fake_console import AGENT, HANG, TOKEN, FakeConsole


def _get(url: str, headers: dict) -> tuple[int, bytes, str | None]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 (loopback)
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:  # noqa: S310 (loopback)
            return answer.status, answer.read(), answer.headers.get("ETag")
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers.get("ETag")


def test_fake_console__matching_if_none_match__answers_304(console):
    url = f"{console.url}/api/v1/runtime/config/{AGENT}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, body, etag = _get(url, auth)
    assert status == 200
    assert msgspec.json.decode(body)["etag"] == etag
    assert _get(url, {**auth, "If-None-Match": etag})[0] == 304
    assert _get(url, {})[0] == 401


def test_fake_console__hang_mode__released_by_close():
    console = FakeConsole()  # not the fixture: closing it is what is measured
    console.modes["config"] = HANG
    console.hang_seconds = 30
    started = time.monotonic()
    console.close()
    assert time.monotonic() - started < 2

"""The runtime contract's examples (contract/*.json), answered by the SDK's fake console: the
console's tests/integration/test_runtime_contract_examples.py runs the same files against
the real console, so what the SDK's I/O tests lean on is what a runtime meets."""

from __future__ import annotations

import select
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from contract_examples import STREAM_READ_SECONDS, Answer, example_names, run_example
from fake_console import ENVIRONMENT, PAYLOAD, TOKEN, FakeConsole


@pytest.fixture
def console():
    """The fake as a console with a stream server (the stream examples need one)."""
    fake = FakeConsole(stream=True)
    yield fake
    fake.close()


@pytest.mark.parametrize("example", example_names())
def test_contract_example__fake_console__answers_as_the_example_says(console, example):
    def send(method, path, headers, body, stream=False):
        if stream:
            return stream_answer(console.url, path, headers)
        request = urllib.request.Request(  # noqa: S310 (loopback)
            console.url + path, data=body or None, headers=dict(headers), method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:  # noqa: S310 (loopback)
                return Answer(answer.status, _lower(answer.headers), answer.read())
        except urllib.error.HTTPError as error:
            return Answer(error.code, _lower(error.headers), error.read())

    variables = {
        "token": TOKEN,
        "environment": ENVIRONMENT,
        "profile_version": PAYLOAD["profile"]["version"],
    }
    run_example(example, send, variables)


def stream_answer(base_url: str, path: str, headers) -> Answer:
    """A stream request on a raw socket: what arrived within STREAM_READ_SECONDS (an event
    stream never ends, so its answer is its beginning)."""
    parts = urllib.parse.urlsplit(base_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=2) as sock:
        head = [f"GET {path} HTTP/1.0", f"Host: {parts.netloc}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        raw = b""
        deadline = time.monotonic() + STREAM_READ_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([sock], [], [], left)[0]:
                break
            chunk = sock.recv(65536)
            if not chunk:
                break
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return Answer(status, _lower(fields), body)


def _lower(headers) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}

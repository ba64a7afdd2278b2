"""The ceiling of the config benchmark (tests/bench/bench_config.py): a raw WSGI callable, no
framework at all, answering a small JSON document under the same server settings. Nothing
written in Python behind this server can be faster."""

from __future__ import annotations

BODY = b'{"agent":"assistant_professional","ok":true}'
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]


def application(environ, start_response):
    start_response("200 OK", HEADERS)
    return [BODY]

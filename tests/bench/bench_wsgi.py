"""The ceiling of the config benchmark (tests/bench/bench_config.py): a raw WSGI callable, no
framework at all, doing the least a config read must do (issue 21 item 10): one dict lookup of
the Authorization header, a strong ETag compared with If-None-Match (304), and a pre-rendered
body — the console's own payload. Nothing written in Python behind this server can be much
faster.

Configured by the benchmark through the environment: BENCH_AUTHORIZATION (the header value it
accepts), BENCH_ETAG, BENCH_BODY_FILE (the console's body). BENCH_HEADERS=console also sends
the console's other response headers (the middleware's, a request id from a counter): the
same bytes on the wire, to tell the server's cost of the longer header list from Python's.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

ETAG = os.environ.get("BENCH_ETAG", '"r1-0000"')
BODY = (
    Path(os.environ["BENCH_BODY_FILE"]).read_bytes()
    if os.environ.get("BENCH_BODY_FILE")
    else b'{"agent":"assistant_professional","ok":true}'
)
EXTRA = json.loads(os.environ.get("BENCH_EXTRA_HEADERS", "[]"))  # [[name, value], …]
SAME_HEADERS = os.environ.get("BENCH_HEADERS") == "console"
TOKENS = {os.environ.get("BENCH_AUTHORIZATION", "Bearer ceiling"): (ETAG, BODY)}

_200 = [("ETag", ETAG), ("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]
_304 = [("ETag", ETAG)]
if SAME_HEADERS:
    _200 += [tuple(h) for h in EXTRA if h[0] not in ("ETag", "Content-Type", "Content-Length")]
    _304 += [tuple(h) for h in EXTRA if h[0] not in ("ETag", "Content-Type", "Cache-Control")]
_UNAUTHORIZED = [("Content-Type", "application/json"), ("Content-Length", "2")]
_ids = itertools.count()
_PREFIX = os.urandom(10).hex()


def application(environ, start_response):
    entry = TOKENS.get(environ.get("HTTP_AUTHORIZATION"))
    if entry is None:
        start_response("401 Unauthorized", _UNAUTHORIZED)
        return [b"{}"]
    etag, body = entry
    if SAME_HEADERS:
        request_id = ("X-Request-ID", f"{_PREFIX}{next(_ids):012x}")
        if environ.get("HTTP_IF_NONE_MATCH") == etag:
            start_response("304 Not Modified", [*_304, request_id])
            return []
        start_response("200 OK", [*_200, request_id])
        return [body]
    if environ.get("HTTP_IF_NONE_MATCH") == etag:
        start_response("304 Not Modified", _304)
        return []
    start_response("200 OK", _200)
    return [body]

"""A runtime reading its config as fast as it can, each read on a new connection (no Django):
`python tests/config_reads.py <token> <path> <seconds> <port>...` prints one line per read,
"<monotonic ns when sent> <status> <ETag>", taking the ports in turn. CLOCK_MONOTONIC is one
clock for every process of the machine, so the parent can order reads against its writes."""

from __future__ import annotations

import http.client
import sys
import time


def main(token: str, path: str, seconds: str, *ports: str) -> None:
    deadline = time.monotonic() + float(seconds)
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    out = []
    n = 0
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", int(ports[n % len(ports)]), timeout=10)
        n += 1
        conn.connect()
        sent = time.monotonic_ns()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        out.append(f"{sent} {response.status} {response.headers.get('ETag', '-')}")
        conn.close()
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])

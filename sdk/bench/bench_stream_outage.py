"""How soon runtimes are back on the config stream after an outage of the stream server alone
(issue 31.12; target: every runtime within 10 s of the stream server answering again).

    python sdk/bench/bench_stream_outage.py [--runtimes 20] [--outage 90]

A fake console (sdk/tests/fake_console.py) answers polls throughout; its stream server, on
another port, is down for ``--outage`` seconds and then listens again on the same port.
``--runtimes`` config clients with the SDK's defaults (poll every 30 s, reconnect from 1 s,
``stream_reconnect_max`` 8 s) hold the stream before the outage; the seconds from the stream
server listening again to each one's reconnection give p50 and max. In the same run, as the
baseline, as many clients whose wait may grow to ``backoff_max`` (120 s) while polls succeed
(``stream_reconnect_max=120``: the wait before issue 31.12).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from context_runtime.client import ConfigClient  # noqa: E402
from fake_console import AGENT, TOKEN, FakeConsole  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", type=int, default=20)
    parser.add_argument("--outage", type=float, default=90.0)
    args = parser.parse_args()

    config, stream = FakeConsole(), FakeConsole(stream=True)
    port = stream.server.server_address[1]
    groups: dict[str, list[ConfigClient]] = {"now": [], "baseline": []}
    for name, cap in (("now", 8.0), ("baseline", 120.0)):
        for _ in range(args.runtimes):
            client = ConfigClient(
                config.url, TOKEN, AGENT, heartbeat_interval=None, stream_url=stream.url,
                stream_reconnect_max=cap,
            )  # fmt: skip
            client.start(wait=5.0)
            groups[name].append(client)
    everyone = [client for clients in groups.values() for client in clients]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(c.transport == "stream" for c in everyone):
        time.sleep(0.05)

    stream.close()
    time.sleep(args.outage)
    stream = FakeConsole(stream=True, port=port)
    back = time.monotonic()
    deadline = back + 130.0  # the baseline's longest wait, and a little
    seen: dict[int, float] = {}  # client → seconds from ``back`` to it on the stream (±20 ms)
    while time.monotonic() < deadline and len(seen) < len(everyone):
        for client in everyone:
            if id(client) not in seen and client.transport == "stream":
                seen[id(client)] = time.monotonic() - back
        time.sleep(0.02)

    print(f"{datetime.now(UTC):%Y-%m-%d} {platform.node()} load {os.getloadavg()[0]:.1f}: "
          f"{args.runtimes} runtimes per group, stream server down {args.outage:g} s")  # fmt: skip
    for name, clients in groups.items():
        delays = [seen[id(c)] for c in clients if id(c) in seen]
        missing = len(clients) - len(delays)
        print(
            f"  {name:9s} back on the stream after the server answered: "
            f"p50 {statistics.median(delays):.1f} s, max {max(delays):.1f} s"
            + (f", {missing} not back within 130 s" if missing else "")
        )
    for client in everyone:
        client.stop(timeout=1.0)
    stream.close()
    config.close()


if __name__ == "__main__":
    main()

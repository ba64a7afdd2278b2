"""A runtime process for the spool tests and the spool benchmark: reports traces through a
TraceReporter with a spool, printing ``R <request_id>`` (flushed) after each report() that
returned True, so whoever kills it knows what it had accepted.

    python tests/spool_runtime.py URL SPOOL_DIR PREFIX COUNT [--pause S] [--drain S] [--timeout S]

``--pause``: seconds between traces. ``--timeout``: the reporter's request timeout (1 s).
``--drain``: after reporting, wait up to S seconds for everything (also what earlier processes
spooled) to be delivered, then print ``STATS {json}``. Without it the process closes its
reporter at once (what is not delivered stays spooled).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

from context_runtime.reporter import TraceReporter
from context_runtime.wire import Candidate, Trace

TOKEN = "cc_rt_test-token"
AGENT = "assistant_professional"


def make_trace(request_id: str) -> Trace:
    return Trace(
        request_id=request_id,
        agent=AGENT,
        occurred_at=datetime.now(UTC),
        status="ready",
        documents={"profile": 7, "after_sales_consultation": 3},
        strategy="after_sales_consultation",
        candidates=[
            Candidate(
                id=f"task_state:{request_id}",
                source="task_state",
                decision="selected",
                version="4",
                size=310,
                required=True,
                reason="required",
            ),
            Candidate(
                id="chat:e-318",
                source="recent_dialogue",
                decision="selected",
                version="e-318",
                size=120,
                relevance=0.82,
                reason="relevant",
            ),
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("spool_dir")
    parser.add_argument("prefix")
    parser.add_argument("count", type=int)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--drain", type=float, default=0.0)
    parser.add_argument("--timeout", type=float, default=1.0)
    args = parser.parse_args()
    reporter = TraceReporter(
        args.url,
        TOKEN,
        spool_dir=args.spool_dir,
        flush_interval=0.05,
        timeout=args.timeout,
        backoff_initial=0.05,
        backoff_max=0.5,
        close_at_exit=False,
    )
    out = sys.stdout
    for i in range(args.count):
        request_id = f"{args.prefix}-{i}"
        if reporter.report(make_trace(request_id)):
            out.write(f"R {request_id}\n")
            out.flush()
        if args.pause:
            time.sleep(args.pause)
    if args.drain:
        deadline = time.monotonic() + args.drain
        while time.monotonic() < deadline:
            # flush() waits for what this process knows of; earlier spools are adopted
            # within the sender's first loop, so ask until nothing is pending.
            if reporter.flush(timeout=1.0) and reporter.pending() == 0:
                break
    reporter.close(timeout=1.0)
    out.write("STATS " + json.dumps(reporter.stats()) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

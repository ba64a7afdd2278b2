"""What the redaction rules cost at ingest (issue 34.4, docs/data-protection.md). A script, not a
test:

    python -m tests.bench.bench_redaction [--batches 6] [--traces 1000] [--candidates 50]

Runs against a separate database (bench_redaction, created and dropped here) on the server of
DATABASE_URL. Posts the same kind of batches (bench_traces' payloads: 1,000 traces × 50
candidates, one reason in a hundred carrying an e-mail and a card number, each trace a small
snapshot) through the whole ingest endpoint (Django's test client: parse, rules, COPY, commit),
alternately with sg-test holding no rules and the five built-in ones (redact), and prints the
median seconds per batch of each and their ratio; then the same for the rules' step alone
(decode + `trace_apply` + `snapshot_apply`) in process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import orjson

from tests.bench._database import BenchDatabase, django_setup, print_machine
from tests.bench.bench_traces import payloads

BENCH_DB = os.environ.get("BENCH_REDACTION_DB", "bench_redaction")


def with_personal_data(traces: list[dict]) -> list[dict]:
    for n, trace in enumerate(traces):
        trace["snapshot"] = {"messages": [{"role": "user", "content": f"where is order A{n}?"}]}
        for i, c in enumerate(trace["candidates"]):
            if (n * 50 + i) % 100 == 7:
                c["reason"] = "asked by alice.tan@example.com, card 4111 1111 1111 1111"
    return traces


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=6, help="per setting")
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    database.create()
    django_setup(database.url)
    try:
        run(args)
    finally:
        if not args.keep:
            database.drop()


def run(args) -> None:
    from django.test import Client

    from tests.factories import runtime_token, snapshots_allowed, world
    from traces.ingest import parse_batch
    from traces.models import RedactionRule, Trace
    from traces.redaction import engine
    from traces.redaction.rules import ruleset_load

    print_machine(f"database {BENCH_DB}")
    sg = world()["environments"]["sg-test"]
    snapshots_allowed()
    secret = runtime_token(sg)
    client = Client()
    start = datetime.now(UTC) - timedelta(hours=2)
    timings: dict[str, list[float]] = {"off": [], "on": []}
    bodies = {}
    for setting in ("off", "on"):
        bodies[setting] = [
            orjson.dumps(
                {
                    "traces": with_personal_data(
                        payloads(args.traces, args.candidates, f"{setting}{b}", start)
                    )
                }
            )
            for b in range(args.batches + 1)
        ]

    def rules(on: bool) -> None:
        RedactionRule.objects.filter(environment=sg).delete()
        if on:
            for detector in ("card", "iban", "email", "phone", "nric"):
                RedactionRule.objects.create(environment=sg, key=detector, detector=detector)

    for b in range(args.batches + 1):  # batch 0 of each warms up, uncounted
        for setting in ("off", "on"):
            rules(setting == "on")
            began = time.perf_counter()
            response = client.post(
                "/api/v1/runtime/traces",
                data=bodies[setting][b],
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {secret}",
            )
            elapsed = time.perf_counter() - began
            assert response.status_code == 200, response.content[:500]
            assert response.json()["accepted"] == args.traces, response.content[:500]
            if b:
                timings[setting].append(elapsed)
    redacted = Trace.objects.filter(redactions__isnull=False).count()
    off, on = statistics.median(timings["off"]), statistics.median(timings["on"])
    print(
        f"ingest endpoint, {args.traces} traces × {args.candidates} candidates per batch, "
        f"median of {args.batches}: rules off {off * 1000:.0f} ms, five rules on "
        f"{on * 1000:.0f} ms — ratio {on / off:.2f} ({redacted} traces redacted)"
    )

    rules(True)
    step = []
    for body in bodies["on"][1:]:
        parsed = parse_batch(body)
        began = time.perf_counter()
        ruleset = ruleset_load(sg.pk)  # one per batch, as at ingest (its memo starts empty)
        for index, trace in parsed.valid:
            counts = Counter()
            engine.trace_apply(trace, ruleset)
            if index in parsed.snapshots:
                engine.snapshot_apply(parsed.snapshots[index], ruleset, counts)
        step.append(time.perf_counter() - began)
    parse = []
    for body in bodies["on"][1:]:
        began = time.perf_counter()
        parse_batch(body)
        parse.append(time.perf_counter() - began)
    print(
        f"rules' step alone: {statistics.median(step) * 1000:.0f} ms per batch "
        f"(parse_batch: {statistics.median(parse) * 1000:.0f} ms)"
    )


if __name__ == "__main__":
    main()

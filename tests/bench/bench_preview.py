"""Impact preview end to end: the database read, the replay and the report of N traces × 50
candidates (issue 20). A script, not a test:

    python -m tests.bench.bench_preview [--traces 100000] [--sizes 10000,100000] [--shards 2]

Runs against a separate database (bench_preview, created and dropped here; `BENCH_PREVIEW_DB`
overrides) on the server of DATABASE_URL. The traces are made by the engine itself (v3-like
strategy, 50 candidates from 6 sources, the replay fields of the SDK), as a runtime records
them, and written with the ingest's own row functions and a COPY (tests.bench.bench_traces),
spread evenly over the last 7 days. `--repeat` is the share of traces whose candidates repeat
an earlier request's (real traffic repeats: the same order, policy and dialogue).

Each size is measured in a fresh process (so its peak RSS is the preview's, not the
generator's), reading the window's first N traces exactly as `preview_execute` does
(`selectors.window_batches`, 1,000 per batch, two queries each):
- end to end: database read + replay (recorded/live and the draft) + report;
- the baseline in the same process: rebuild each trace's candidates and one `select()`, the
  rows already in memory (what no replay can do with less), over the same traces;
- the split of the end-to-end time: database read vs replay + report;
- peak RSS (`resource.getrusage`, the whole process: Python, Django, one batch, the report).

Then the real sharded path (`--shards N`, default 2; 0 skips it): a `celery -A console worker
--concurrency N` on the bench database runs N `previews.run_shard` tasks of a Preview of the
same window until the last one has merged the report — timed end to end, peak RSS (VmHWM) of
its pool processes, and its report checked equal to the one-process report.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.bench._database import ROOT, BenchDatabase, django_setup, print_machine

BENCH_DB = os.environ.get("BENCH_PREVIEW_DB", "bench_preview")
os.environ.setdefault("BENCH_TRACES_DB", BENCH_DB)

BODY = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue", "memory", "knowledge"],
    "on_missing": {"order_delivery": "general_policy_only"},
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
DRAFT = {**BODY, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}
FIXED, WINDOW = 1280, 128_000
DAYS = 7


def _candidates(rng: random.Random, t: int):
    from context_runtime.engine import CandidateItem

    items = [
        CandidateItem(id=f"task:{t}", source="task_state", size=rng.randrange(200, 400)),
        CandidateItem(id=f"order:{t}", source="order_delivery", size=rng.randrange(400, 800)),
        CandidateItem(
            id="P7", source="applicable_policy", size=rng.randrange(1500, 2500), bundle="policy-P7"
        ),
    ]
    for i in range(47):
        source = ("recent_dialogue", "memory", "knowledge")[i % 3]
        items.append(
            CandidateItem(
                id=f"{source}:{i}",
                source=source,
                size=rng.randrange(20, 200),
                relevance=round(rng.random(), 2),
            )
        )
    return items


def generate(total: int, repeat: float, start: datetime, agent_id: int, env_id: int) -> float:
    """Write `total` traces into the bench database, 5,000 at a time; returns the seconds."""
    from context_runtime import wire
    from context_runtime.engine import Strategy, select

    from tests.bench.bench_traces import bare_copy, wire_rows

    started = time.perf_counter()
    rng = random.Random(20)
    strategy = Strategy.from_body(BODY)
    step = timedelta(days=DAYS) / total
    earlier: list = []
    chunk = []
    for t in range(total):
        if earlier and rng.random() < repeat:
            items = rng.choice(earlier)
        else:
            items = _candidates(rng, t)
            if len(earlier) < 2_000:
                earlier.append(items)
        selection = select(
            strategy=strategy, candidates=items, context_window=WINDOW, fixed_input_tokens=FIXED
        )
        trace = wire.Trace(
            request_id=f"bench-{t:08d}",
            agent="assistant_professional",
            occurred_at=start + step * t,
            documents={"after_sales_consultation": 3},
            strategy="after_sales_consultation",
            **selection.trace_fields(),
        )
        chunk.append(trace)
        if len(chunk) == 5_000:
            bare_copy(wire_rows(chunk, agent_id, env_id))
            chunk = []
    if chunk:
        bare_copy(wire_rows(chunk, agent_id, env_id))
    return time.perf_counter() - started


def measure(n: int, start: datetime, total: int, agent_id: int, env_id: int) -> dict:
    """One size, in this (fresh) process: end to end, its split, the baseline, peak RSS."""
    from context_runtime.engine import Strategy, select

    from traces.previews import report, selectors

    live, draft = Strategy.from_body(BODY), Strategy.from_body(DRAFT)
    step = timedelta(days=DAYS) / total
    window = {
        "agent_id": agent_id,
        "environment_id": env_id,
        "strategy": "after_sales_consultation",
        "start": start,
        "end": start + step * n,
        "stored_by": datetime.now(UTC),
    }
    versions = report.Versions(recorded={3: live}, live_number=3, live=live, candidate=draft)

    started = time.perf_counter()
    counts = selectors.window_counts(**window)
    run = report.Replay(versions)
    read = time.perf_counter() - started
    batches = selectors.window_batches(**window)
    while True:
        t0 = time.perf_counter()
        batch = next(batches, None)
        read += time.perf_counter() - t0
        if batch is None:
            break
        for trace, candidates, _ in batch:
            run.add(trace, candidates)
    result = run.report()
    end_to_end = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    baseline = 0.0
    for batch in selectors.window_batches(**window):
        t0 = time.perf_counter()
        for trace, candidates, _ in batch:
            items = [report.candidate_item(r) for r in candidates]
            select(
                strategy=live,
                candidates=items,
                context_window=trace[report.T_WINDOW],
                max_input_tokens=trace[report.T_MAX],
                fixed_input_tokens=trace[report.T_FIXED],
                relevance_threshold=trace[report.T_THRESHOLD],
            )
        baseline += time.perf_counter() - t0
    assert sum(counts.values()) == result["traces_read"] == n, (counts, result["traces_read"])
    assert result["fidelity"]["share"] == 1.0, result["fidelity"]
    return {
        "traces": n,
        "end_to_end": end_to_end,
        "read": read,
        "replay_report": end_to_end - read,
        "baseline": baseline,
        "peak_rss_mb": peak,
        "memo_hits": getattr(run, "memo_hits", 0),
        "report": _comparable(result),
    }


def start_worker(bench_url: str, shards: int, queue: str) -> subprocess.Popen:
    """`celery -A console worker --concurrency <shards>` (prefork, as `make run` starts it)
    against the bench database, on a queue of its own; returns once it is ready."""
    log_path = ROOT / ".data" / f"{queue}.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process
    env = {
        **os.environ,
        "DATABASE_URL": bench_url,
        "CELERY_QUEUE": queue,
        "PREVIEW_SHARDS": str(shards),
        "DEBUG": "false",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "console", "worker", "--concurrency", str(shards)]
        + [
            "-Q",
            queue,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "INFO",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while "ready." not in log_path.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start: {log_path}")
        time.sleep(0.2)
    return proc


def worker_peak_mb(proc: subprocess.Popen) -> float:
    """The largest peak RSS (VmHWM) of the worker's pool processes."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    peaks = []
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) / 1024)
    return max(peaks)


def measure_worker(n: int, meta: dict, shards: int, queue: str) -> dict:
    """The real sharded path: a Preview of the window's first n traces and its shard rows,
    one `previews.run_shard` task per shard sent to the worker pool (as `preview_request`
    does on commit), timed until the last shard has merged the report."""
    from django.test import override_settings

    from strategies.documents.models import Document, Version
    from traces.previews import report, selectors, services
    from traces.previews.models import Preview, PreviewShard

    start = datetime.fromisoformat(meta["start"])
    end = start + timedelta(days=DAYS) / meta["total"] * n
    document, _ = Document.objects.get_or_create(
        agent_id=meta["agent_id"], key="after_sales_consultation", kind=Document.Kind.STRATEGY
    )
    Version.objects.get_or_create(
        document=document,
        number=3,
        defaults={
            "state": Version.State.FROZEN,
            "body": BODY,
            "content_hash": "bench-v3",
            "frozen_at": datetime.now(UTC),
        },
    )
    window = {
        "agent_id": meta["agent_id"],
        "environment_id": meta["env_id"],
        "strategy": document.key,
        "start": start,
        "end": end,
        "stored_by": datetime.now(UTC),
    }
    started = time.perf_counter()
    counts = selectors.window_counts(**window)  # what preview_request counts
    preview = Preview.objects.create(
        agent_id=meta["agent_id"],
        environment_id=meta["env_id"],
        document=document,
        version_number=4,
        content_hash="bench-draft",
        body=DRAFT,
        live_version_number=3,
        live_content_hash="bench-v3",
        window_start=start,
        window_end=end,
        engine=report.CONSOLE_ENGINE,
        traces_total=sum(report.stratified_quotas(counts).values()),
        shard_count=shards,
        window_by_status=counts,
    )
    PreviewShard.objects.bulk_create(PreviewShard(preview=preview, index=k) for k in range(shards))
    with override_settings(CELERY_TASK_DEFAULT_QUEUE=queue):
        services.preview_queue(preview.pk, shards)
    while True:
        state = Preview.objects.values_list("state", flat=True).get(pk=preview.pk)
        if state not in (Preview.State.QUEUED, Preview.State.RUNNING):
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    preview.refresh_from_db()
    assert preview.state == Preview.State.COMPLETE, (preview.state, preview.failure)
    result = preview.report
    assert result["traces_read"] == n and result["fidelity"]["share"] == 1.0
    return {"traces": n, "shards": shards, "end_to_end": elapsed, "report": result}


def _comparable(result: dict) -> str:
    """A report without what only names the run (candidate version number, window block)."""
    rest = {k: v for k, v in result.items() if k not in ("candidate_version", "window")}
    return json.dumps(rest, sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeat", type=float, default=0.0)
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    parser.add_argument("--reuse", action="store_true", help="measure the kept database again")
    parser.add_argument(
        "--shards", type=int, default=2, help="shard tasks and worker processes (0: none)"
    )
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--meta", help=argparse.SUPPRESS)
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    bench_url = database.url
    if args.measure:
        django_setup(bench_url)
        meta = json.loads(args.meta)
        where = (
            args.measure,
            datetime.fromisoformat(meta["start"]),
            meta["total"],
            meta["agent_id"],
            meta["env_id"],
        )
        print(json.dumps(measure(*where)))
        return

    print_machine(f"load {os.getloadavg()[0]:.2f}")
    meta_file = ROOT / ".data" / f"{BENCH_DB}.json"
    if not args.reuse:
        database.create()
    django_setup(bench_url)
    if args.reuse:
        meta = json.loads(meta_file.read_text())
    else:
        from django.db import connection

        from strategies.catalog.models import Agent, Environment
        from traces import partitions

        agent = Agent.objects.create(key="assistant_professional", name="AP")
        env = Environment.objects.create(key="sg-test", name="SG test", position=1)
        start = (datetime.now(UTC) - timedelta(days=DAYS, hours=1)).replace(microsecond=0)
        with connection.cursor() as cursor:
            partitions.ensure_range(
                cursor, today=datetime.now(UTC).date(), days_back=9, days_ahead=1
            )
        seconds = generate(args.traces, args.repeat, start, agent.pk, env.pk)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE traces_trace")
        print(f"generated {args.traces:,} traces × 50 candidates in {seconds:.0f} s")
        meta = {
            "start": start.isoformat(),
            "total": args.traces,
            "agent_id": agent.pk,
            "env_id": env.pk,
        }
        meta_file.parent.mkdir(exist_ok=True)
        meta_file.write_text(json.dumps(meta))
    queue = f"bench-preview-{os.getpid()}"
    worker = start_worker(bench_url, args.shards, queue) if args.shards else None
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            load = os.getloadavg()[0]
            child = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tests.bench.bench_preview",
                    "--measure",
                    str(n),
                    "--meta",
                    json.dumps(meta),
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(child.stdout.strip().splitlines()[-1])
            print(
                f"{n:>7,} traces × 50 (load {load:.2f}): one process: end to end "
                f"{r['end_to_end']:6.2f} s (read {r['read']:5.2f} s, replay + report "
                f"{r['replay_report']:5.2f} s) · baseline rebuild + select() {r['baseline']:5.2f} s"
                f" · e2e/baseline {r['end_to_end'] / r['baseline']:.2f} · "
                f"peak RSS {r['peak_rss_mb']:.0f} MB · memo hits {r['memo_hits']:,}"
            )
            if worker is None:
                continue
            load = os.getloadavg()[0]
            w = measure_worker(n, meta, args.shards, queue)
            same = _comparable(w["report"]) == r["report"]
            print(
                f"{'':>7}  {args.shards} shard tasks on the worker (--concurrency "
                f"{args.shards}, load {load:.2f}): end to end {w['end_to_end']:6.2f} s · "
                f"e2e/baseline {w['end_to_end'] / r['baseline']:.2f} · peak RSS per worker "
                f"process {worker_peak_mb(worker):.0f} MB · report equal to one process: {same}"
            )
            assert same, "the sharded report differs from the one-process report"
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=30)
        if not args.keep:
            database.drop()


if __name__ == "__main__":
    main()

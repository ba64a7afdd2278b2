"""A runtime wired to the Context Console: config, providers, engine, traces, outcomes.

Run it with a runtime token (config:read, traces:write, manifest:write, outcomes:write):

    CONSOLE_URL=https://console.example.com CONSOLE_TOKEN=cc_rt_... python runtime.py

Each line on stdin is a request ("<task id> <question>"); it prints the request id, a tab
and the answer.
In a real service the loop at the bottom is your web framework's request handler.
"""

import os
import signal
import sys
import uuid
from datetime import UTC, datetime

from context_runtime import rollouts, wire
from context_runtime.client import ConfigClient
from context_runtime.engine import NOT_FETCHED, CandidateItem, Strategy, select
from context_runtime.manifest_report import Registry, report_manifest_in_background
from context_runtime.reporter import TraceReporter

CONSOLE_URL = os.environ["CONSOLE_URL"]
TOKEN = os.environ["CONSOLE_TOKEN"]
AGENT = os.environ.get("CONSOLE_AGENT", "assistant_professional")  # the console's agent key
STATE = os.environ.get("RUNTIME_STATE_DIR", os.path.expanduser("~/.after-sales-runtime"))
RUNTIME_NAME = "after-sales-runtime 1.0"  # how the console's Runtimes card names this runtime
STRATEGY = "after_sales_consultation"

# What this runtime implements, declared to the console: one provider per source. It runs the
# console's shadow versions and staged rollouts (serving.run_shadow, serving.rollout below).
registry = Registry(features=("shadow", "split"))


@registry.provider("task_state")
def task_state(request):
    return CandidateItem(
        id=f"task_state:{request['task_id']}", source="task_state", version="4",
        text=f"Task {request['task_id']}: return request for order A1042.",
    )  # fmt: skip


@registry.provider("order_delivery")
def order_delivery(request):
    return CandidateItem(
        id="order:A1042", source="order_delivery", version="r12",
        text="Order A1042: a kettle, delivered 2026-11-20.",
    )  # fmt: skip


@registry.provider("applicable_policy")
def applicable_policy(request):
    # A search may find more than the strategy reads (here an FAQ entry): the engine records
    # such an item as not requested, in the trace, and never sends it to the model.
    return [
        CandidateItem(
            id="P7-v2", source="applicable_policy", version="v2",
            text="Policy P7 v2: damaged goods may be returned within 30 days.",
        ),
        CandidateItem(id="faq:returns", source="faq", version="3", text="FAQ: returns."),
    ]  # fmt: skip


client = ConfigClient(
    CONSOLE_URL,
    TOKEN,
    AGENT,
    # The last good configuration, on disk: the runtime starts from it when the console is down.
    cache_path=os.path.join(STATE, "console-config.json"),
    runtime_name=RUNTIME_NAME,
)
reporter = TraceReporter.for_client(client)  # durable: spools beside the config cache
manifest = report_manifest_in_background(CONSOLE_URL, TOKEN, registry, RUNTIME_NAME)


def candidates_for(strategy, request):
    """Every source the strategy reads, asked once; a failing provider is `not_fetched`."""
    found = []
    for source in sorted(strategy.sources):
        provider = registry.get_provider(source)
        try:
            items = provider(request) if provider else []
        except Exception as error:
            items = CandidateItem(
                id=source, source=source, outcome=NOT_FETCHED, note=type(error).__name__
            )
        found += items if isinstance(items, list) else [items]
    return found


def answer(request_id, task_id, principal, question):
    snapshot = client.snapshot()  # a memory read, never the network
    serving = rollouts.serve(
        snapshot, STRATEGY, request_id=request_id, task_id=task_id, principal=principal
    )
    if serving.document is None:
        return "I can't answer this yet: the runtime has no configuration."
    strategy = Strategy.from_body(serving.document.body)  # cache it per version in real code
    request = {"task_id": task_id, "principal": principal, "question": question}
    selection = select(
        strategy=strategy, candidates=candidates_for(strategy, request), context_window=128_000
    )
    reporter.report(  # never blocks: spooled to disk, sent in the background
        wire.Trace(
            request_id=request_id,
            agent=AGENT,  # the agent this request ran as: outcomes name it from here
            occurred_at=datetime.now(UTC),
            strategy=STRATEGY,
            task=wire.Task(id=task_id, revision=4),
            principal=principal,
            documents=serving.documents(snapshot),
            shadow=serving.run_shadow(selection),
            rollout=serving.rollout,
            **selection.trace_fields(),
        ),
        resolution=snapshot.resolution,
        strategy=serving.document,
    )
    if not selection.usable:  # never hand the model a package that cannot do the task
        return f"I can't answer this reliably yet: {selection.reason}"
    context = "\n".join(item.text or "" for item in selection.selected)
    return f"(the model's answer to {question!r}, given {len(context)} characters of context)"


def main():
    client.start(wait=5)  # the config stream, polling as its safety net
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a clean stop runs the finally
    try:
        for line in sys.stdin:
            task_id, _, question = line.strip().partition(" ")
            request_id = f"req-{uuid.uuid4().hex[:12]}"
            print(f"{request_id}\t{answer(request_id, task_id, 'shop-a/user-417', question)}")
            sys.stdout.flush()
            # How it turned out, when the application knows (here: at once).
            reporter.report_outcome(request_id, "task_completed", True)
    finally:
        reporter.close()  # what the console did not take yet stays spooled for the next run
        manifest.stop()
        client.stop()


if __name__ == "__main__":
    main()

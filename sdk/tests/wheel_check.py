"""Run the ADK example (``sdk/examples/adk_agent.py``) against a console, as a user who
installed the wheel would: ``scripts/sdk_wheel_check.sh`` runs this with the clean virtual
environment's interpreter.

    python sdk/tests/wheel_check.py            # starts the fake console on loopback
    CONSOLE_URL=... CONSOLE_TOKEN=... python sdk/tests/wheel_check.py   # a live console

Checks that ``context_runtime`` comes from site-packages (not the source tree), that the
example answers through the offline model with the assembled context, and (fake console)
that the console got the manifest and one ``ready`` trace. Then, in this process with
OpenTelemetry's SDK (google-adk depends on it), runs the example once more against the same
console and checks that the assembly span's parent is the one ``sdk/README.md`` §
OpenTelemetry states for this google-adk (``otel_parentage.py``) and (fake console) that the
trace it got records the span's ids; the line ``OK otel: …`` names the request, trace and
span id, for a live console's test to find. Prints ``OK …`` and exits 0.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "adk_agent.py"


def main() -> int:
    import context_runtime
    import google.adk

    where = Path(context_runtime.__file__).resolve()
    if "site-packages" not in where.parts:
        print(f"FAIL context_runtime imported from {where}, not the installed wheel")
        return 1
    adk_version = getattr(google.adk, "__version__", "?")
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_API_KEY"}  # the offline model
    # The example's reporter spools in the user's state directory by default: a fresh one here,
    # never the machine's ~/.local/state.
    env.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="wheel-check-state-"))
    console = None
    if "CONSOLE_URL" not in env:
        sys.path.insert(0, str(HERE))
        from fake_console import AGENT, TOKEN, FakeConsole

        console = FakeConsole()
        env.update(CONSOLE_URL=console.url, CONSOLE_TOKEN=TOKEN, CONSOLE_AGENT=AGENT)
    try:
        result = subprocess.run(
            [sys.executable, str(EXAMPLE), "Can I still return order A1042?"],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
            timeout=120,
        )
        answer = result.stdout.strip()
        if result.returncode != 0 or not answer.startswith("[offline model]"):
            print(f"FAIL the example answered {answer!r} (exit {result.returncode})")
            print(result.stderr[-3000:])
            return 1
        if console is not None:
            statuses = [trace["status"] for trace in console.stored.values()]
            if statuses != ["ready"] or not console.manifests:
                print(f"FAIL console got traces {statuses} and {len(console.manifests)} manifests")
                return 1
    finally:
        if console is not None:
            console.close()
    otel_problems, otel_found = otel_check(adk_version)
    if otel_problems:
        print("FAIL OpenTelemetry: " + "; ".join(otel_problems))
        return 1
    print(
        f"OK context-console-runtime {context_runtime.__version__} from {where.parent}, "
        f"google-adk {adk_version}: {answer[:90]}"
    )
    print(f"OK otel: {otel_found}")
    return 0


def otel_check(adk_version: str) -> tuple[list[str], str]:
    """The example run once more in this process under an in-memory span exporter, against
    CONSOLE_URL when set (the console's own test then reads the stored trace) or the fake
    console: what differs from the documented parentage and ids (empty: none), and the line
    that says what was found."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    sys.path.insert(0, str(HERE))
    from otel_parentage import parentage

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    spec = importlib.util.spec_from_file_location("adk_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    os.environ.pop("GOOGLE_API_KEY", None)  # the offline model
    console = None
    if "CONSOLE_URL" in os.environ:
        url, token = os.environ["CONSOLE_URL"], os.environ["CONSOLE_TOKEN"]
        agent = os.environ.get("CONSOLE_AGENT", "assistant_professional")
    else:
        from fake_console import AGENT, TOKEN, FakeConsole

        console = FakeConsole()
        url, token, agent = console.url, TOKEN, AGENT
    try:
        asyncio.run(example.run(url, token, agent, "Can I still return order A1042?"))
        stored = None if console is None else list(console.stored.values())
    finally:
        if console is not None:
            console.close()
    found = parentage(exporter.get_finished_spans())
    if len(found) != 1:
        return [f"{len(found)} assembly spans, not one"], ""
    (one,) = found
    problems = one.problems(adk_version)
    ids = {
        "trace_id": trace.format_trace_id(one.assembly.context.trace_id),
        "span_id": trace.format_span_id(one.assembly.context.span_id),
    }
    if stored is not None and [t.get("otel") for t in stored] != [ids]:
        problems.append(f"the console got {[t.get('otel') for t in stored]}, the span is {ids}")
    request_id = one.assembly.attributes["context_console.request_id"]
    return problems, (
        f"the assembly span's parent is {one.parent.name!r}, as documented; request "
        f"{request_id} trace {ids['trace_id']} span {ids['span_id']}"
    )


if __name__ == "__main__":
    sys.exit(main())

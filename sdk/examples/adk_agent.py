"""An ADK agent whose every model call is assembled by the Context Console runtime SDK.

The agent reads its live configuration from the console (``ConfigClient``), declares what it
implements (``Registry`` → ``report_manifest``), assembles each model call with
``ContextAssembly.before_model_callback`` (providers → engine → ``<user-context>`` and
``<query-context>``, or an explicit refusal) and reports a trace per call
(``TraceReporter``, durable by default: traces wait on disk while the console is down and
survive a restart).

Run it against a console, with a runtime token that has ``config:read``, ``traces:write`` and
``manifest:write`` for the agent's environment::

    pip install -e "sdk[adk]"
    export CONSOLE_URL=https://console.example.com
    export CONSOLE_TOKEN=cc_rt_...                   # the runtime token
    export CONSOLE_AGENT=assistant_professional      # the agent key (default)
    export CONSOLE_SPOOL_DIR=/var/lib/my-agent/traces  # optional: where traces are spooled
    python sdk/examples/adk_agent.py "Can I still return order A1042?"

Add ``--order-down`` to simulate the order service timing out (the strategy's
``on_missing.order_delivery`` handler takes over) or ``--no-permission`` to simulate the
permission check being unavailable (the agent refuses explicitly, the model is not called).

With ``GOOGLE_API_KEY`` set the agent talks to Gemini (``MODEL``, default
``gemini-2.5-flash``); without it an offline model answers with what it was sent, so the
example runs without any Google account.  The providers below return the consultation of
docs/background.md § Consultation A1042; a real runtime reads its order service, policy store
and chat history.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from context_runtime.adk import ContextAssembly, ProviderRequest, Route
from context_runtime.client import ConfigClient
from context_runtime.engine import NO_ACCESS, NOT_FETCHED, CandidateItem
from context_runtime.manifest_report import Registry, report_manifest
from context_runtime.reporter import TraceReporter
from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

RUNTIME = "adk-example 0.1"
APP = "context-console-adk-example"


class OfflineModel(BaseLlm):
    """Answers with a summary of the request it received (no network, no key)."""

    model: str = "offline-echo"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):
        first = llm_request.contents[0].parts[0].text or ""
        last = llm_request.contents[-1].parts[0].text or ""
        text = (
            f"[offline model] {len(llm_request.contents)} contents; "
            f"first begins {first[:40]!r}; the current turn begins {last[:60]!r}"
        )
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def build_registry(*, order_down: bool = False, no_permission: bool = False) -> Registry:
    """The providers, handler and sections this runtime implements (demo data)."""
    registry = Registry()

    @registry.provider("task_state")
    def task_state(request: ProviderRequest):
        return CandidateItem(
            id=f"task_state:{request.task_id}",
            source="task_state",
            version=str(request.task_revision),
            text=f"Task {request.task_id}: return request for order A1042; quality not verified.",
        )

    @registry.provider("order_delivery")
    async def order_delivery(request: ProviderRequest):
        if order_down:
            return CandidateItem(
                id="order:A1042",
                source="order_delivery",
                outcome=NOT_FETCHED,
                note="order service timed out after 2,000 ms",
            )
        if no_permission:
            return CandidateItem(
                id="order:A1042",
                source="order_delivery",
                outcome=NO_ACCESS,
                note="permission check unavailable",
            )
        return CandidateItem(
            id="order:A1042",
            source="order_delivery",
            version="r12",
            text="Order A1042 (revision 12): a kettle, delivered 2026-11-20 to shop-a.",
        )

    @registry.provider("applicable_policy")
    def applicable_policy(request: ProviderRequest):
        return CandidateItem(
            id="P7-v2",
            source="applicable_policy",
            version="v2",
            text="Policy P7 v2: damaged goods may be returned within 30 days of delivery.",
        )

    @registry.provider("recent_dialogue")
    def recent_dialogue(request: ProviderRequest):
        return [
            CandidateItem(
                id="chat:e-318",
                source="recent_dialogue",
                version="e-318",
                relevance=0.82,
                text="User: the kettle arrived with a cracked lid.",
            ),
            CandidateItem(
                id="old-chat",
                source="recent_dialogue",
                version="e-311",
                relevance=0.05,
                text="An older introduction of the X200 blender.",
                note="older product introduction",
            ),
        ]

    @registry.handler("general_policy_only")
    def general_policy_only(request: ProviderRequest, selection) -> str:
        return (
            "The order could not be read. Explain the general terms of the applicable policy "
            "only, do not judge this order, and say that the order details are missing."
        )

    for key in ("high_level_profile", "communication_style"):
        registry.register_section(key, "user_context")
    for key in ("time_summary", "chat_topic"):
        registry.register_section(key, "query_context")
    registry.register_tool("lookup_order")
    registry.register_tool("search_policy")
    return registry


SECTION_VALUES = {
    "high_level_profile": lambda request: "Owner of a small kitchenware shop.",
    "communication_style": lambda request: "Short answers, plain English.",
    "time_summary": lambda request: "The consultation takes place on 2026-11-30.",
    "chat_topic": lambda request: "Return of a damaged kettle.",
}


def build_agent(assembly: ContextAssembly, model: BaseLlm | str | None = None) -> LlmAgent:
    if model is None:
        model = (
            os.environ.get("MODEL", "gemini-2.5-flash")
            if os.environ.get("GOOGLE_API_KEY")
            else OfflineModel()
        )
    return LlmAgent(
        name="assistant",
        model=model,
        instruction="You answer after-sales questions. Use only the evidence you are given.",
        before_model_callback=assembly.before_model_callback,
    )


async def run(
    base_url: str,
    token: str,
    agent_key: str,
    question: str,
    *,
    order_down: bool = False,
    no_permission: bool = False,
    model: BaseLlm | str | None = None,
    spool_dir: str | None = None,
) -> str:
    """Ask the agent one question; returns its final answer. The traces go through the
    reporter's disk spool (delivered by this or a later run): by default the user's state
    directory (``TraceReporter``), or ``spool_dir``."""
    registry = build_registry(order_down=order_down, no_permission=no_permission)
    report_manifest(base_url, token, registry, RUNTIME, attempts=2)
    client = ConfigClient(base_url, token, agent_key, poll_interval=30.0, runtime_name=RUNTIME)
    spool = {"spool_dir": spool_dir} if spool_dir is not None else {}  # else the default one
    reporter = TraceReporter.for_client(client, flush_interval=0.2, close_at_exit=False, **spool)
    try:
        if not client.start(wait=5.0):
            print("warning: no configuration yet; the agent will refuse", file=sys.stderr)
        assembly = ContextAssembly(
            client=client,
            registry=registry,
            strategy_for=lambda ctx, req: Route(strategy="after_sales_consultation"),
            reporter=reporter,
            sections=SECTION_VALUES,
            context_window=128_000,
        )
        sessions = InMemorySessionService()
        runner = Runner(app_name=APP, agent=build_agent(assembly, model), session_service=sessions)
        session = await sessions.create_session(
            app_name=APP,
            user_id="shop-a/user-417",  # the trusted principal, from your identity service
            state={"task_id": "T9", "task_revision": 4},
        )
        answer = ""
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for event in runner.run_async(
            user_id=session.user_id, session_id=session.id, new_message=message
        ):
            if event.is_final_response() and event.content and event.content.parts:
                answer = "".join(p.text or "" for p in event.content.parts)
        return answer
    finally:
        reporter.close(timeout=5.0)
        client.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="Can I still return order A1042?")
    parser.add_argument("--order-down", action="store_true")
    parser.add_argument("--no-permission", action="store_true")
    parser.add_argument(
        "--spool-dir",
        default=os.environ.get("CONSOLE_SPOOL_DIR"),
        help="the trace reporter's disk spool (default: $CONSOLE_SPOOL_DIR, else the "
        "reporter's default directory)",
    )
    args = parser.parse_args(argv)
    try:
        base_url, token = os.environ["CONSOLE_URL"], os.environ["CONSOLE_TOKEN"]
    except KeyError as missing:
        parser.error(f"set {missing.args[0]} (see the docstring)")
    agent_key = os.environ.get("CONSOLE_AGENT", "assistant_professional")
    answer = asyncio.run(
        run(
            base_url,
            token,
            agent_key,
            args.question,
            order_down=args.order_down,
            no_permission=args.no_permission,
            spool_dir=args.spool_dir,
        )
    )
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())

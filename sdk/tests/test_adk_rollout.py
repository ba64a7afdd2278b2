"""A staged rollout on the ADK path (issue 23): ``ContextAssembly`` serves each request the
version of its arm (``context_runtime.rollouts``), runs the other arm's version as the honest
shadow on the same candidates, and reports ``documents[key]`` = the served version,
``shadow`` = the other arm and ``rollout`` = {id, arm, step} — without an extra provider,
model or tool call. The requests go through ``before_model_callback`` as ADK calls it, with
the configuration from a fake console through a real ``ConfigClient``."""

from __future__ import annotations

import asyncio
import collections
import copy
import logging

import pytest

pytest.importorskip("google.adk", reason="google-adk is not installed (the sdk's [adk] extra)")

from context_runtime import (
    rollouts,  # noqa: E402
    wire,  # noqa: E402
)
from context_runtime.adk import ContextAssembly, Route  # noqa: E402
from context_runtime.rollouts import assign_arm  # noqa: E402
from fake_console import PAYLOAD  # noqa: E402
from test_adk_shadow import (  # noqa: E402
    KEY,
    SOURCES,
    V3,
    CallbackContext,
    Keep,
    Providers,
    assemble_all,
    disagrees,
    model_request,
    run_agent_turn,
)

POLICY_BUNDLE = {"policy-P7": ["P7-"]}
SMALLER = {**V3, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}
READS_MORE = {**V3, "optional": ["recent_dialogue", "memory"]}
A_A_REQUESTS = 10_000


def rollout_payload(body: dict | None, *, share: float, step: int = 1, unit="task") -> dict:
    """The consultation at v3 live (the control), and when ``body`` is given, a rollout of it
    as v4."""
    payload = copy.deepcopy(PAYLOAD)
    payload["strategies"][KEY]["body"]["bundles"] = POLICY_BUNDLE
    if body is not None:
        new = {**copy.deepcopy(body), "bundles": POLICY_BUNDLE}
        payload["rollouts"] = {
            KEY: {
                "id": "ro-7",
                "version": 4,
                "body": new,
                "share": share,
                "unit": unit,
                "step": step,
            }  # fmt: skip
        }
    return payload


def by_task(callback_context, llm_request):
    """The route: the task id from the session state (``task_id``), so units vary."""
    return Route(strategy=KEY)


def assemble(client, providers: Providers, count: int, *, tasks: int | None = None):
    """``count`` model calls (``assemble_all``); request ``n`` belongs to task
    ``T<n % tasks>`` (every request its own task when ``tasks`` is None)."""
    return assemble_all(
        client,
        providers,
        count,
        strategy_for=by_task,
        state=lambda n: {"task_id": f"T{n if tasks is None else n % tasks}"},
    )


def test_rollout__each_request_served_its_arm__other_arm_as_shadow__trace_says_so(config):
    client = config(rollout_payload(SMALLER, share=0.5, step=2))

    traces = assemble(client, Providers(), 1_000, tasks=300)

    arms = collections.Counter()
    tasks_arm: dict[str, set] = collections.defaultdict(set)
    for trace in traces:
        arm = assign_arm("ro-7", 0.5, trace.task.id)
        arms[arm] += 1
        tasks_arm[trace.task.id].add(trace.rollout.arm)
        assert trace.rollout == wire.TraceRollout(id="ro-7", arm=arm, step=2)
        served, other = (4, 3) if arm == "new" else (3, 4)
        assert (trace.documents[KEY], trace.shadow.version) == (served, other)
        # The smaller budget (v4) never uses more tokens than the larger one (v3).
        new_tokens, old_tokens = (
            (trace.input_estimate.value, trace.shadow.used_tokens)
            if arm == "new"
            else (trace.shadow.used_tokens, trace.input_estimate.value)
        )
        assert new_tokens <= old_tokens
        assert trace.selection.fixed_input_tokens > 0
    assert 400 < arms["new"] < 600
    assert all(len(seen) == 1 for seen in tasks_arm.values())  # a task keeps its arm
    # v4 is worse on some requests of both arms: seen from either side.
    for arm in ("new", "old"):
        assert any(t.rollout.arm == arm and t.status != t.shadow.status for t in traces), (
            f"no disagreement seen on arm {arm}"
        )


def test_a_a_rollout__new_equal_to_old__10000_adk_requests__agree_on_every_one(config):
    client = config(rollout_payload(V3, share=0.5))
    providers = Providers()

    traces = assemble(client, providers, A_A_REQUESTS)

    assert len(traces) == A_A_REQUESTS
    arms = collections.Counter(t.rollout.arm for t in traces)
    assert abs(arms["new"] - A_A_REQUESTS / 2) < 4.42 * (A_A_REQUESTS * 0.25) ** 0.5
    statuses = collections.Counter(t.status for t in traces)
    assert {"ready", "degraded", "budget_exceeded", "missing_required_data"} <= set(statuses)
    assert all({t.documents[KEY], t.shadow.version} == {3, 4} for t in traces)
    disagreements = [t.request_id for t in traces if disagrees(t)]
    assert disagreements == [], f"{len(disagreements)} of {A_A_REQUESTS} disagree"
    # Each source asked once per request (none for the shadow), memory never.
    assert providers.calls == {
        **dict.fromkeys(SOURCES, A_A_REQUESTS),
        "general_policy_only": statuses["degraded"],
    }


@pytest.mark.parametrize(
    ("share", "arm", "served", "other", "not_fetched", "memory_calls"),
    [
        # The shadow step: everyone old; the new version reads memory, which old never asks.
        (0.0, "old", 3, 4, ("memory",), 0),
        # The last step: everyone new (it reads memory itself); old runs as the shadow.
        (1.0, "new", 4, 3, (), 300),
    ],
)
def test_shadow_and_full_steps__everyone_one_arm__the_other_as_shadow(
    config, share, arm, served, other, not_fetched, memory_calls
):
    client = config(rollout_payload(READS_MORE, share=share, step=2))
    providers = Providers()

    traces = assemble(client, providers, 300)

    assert {(t.rollout.arm, t.rollout.step, t.documents[KEY]) for t in traces} == {(arm, 2, served)}
    assert {t.shadow.version for t in traces} == {other}
    assert {t.shadow.sources_not_fetched for t in traces} == {not_fetched}
    assert providers.calls["memory"] == memory_calls


def test_older_console__payload_without_rollouts__traces_as_before(config):
    client = config(rollout_payload(None, share=0.0))

    traces = assemble(client, Providers(), 200)

    assert {(t.rollout, t.shadow, t.documents[KEY]) for t in traces} == {(None, None, 3)}


def test_malformed_rollout__logged__requests_serve_live(config, caplog):
    payload = rollout_payload(SMALLER, share=0.5)
    payload["rollouts"][KEY]["share"] = 2.0
    with caplog.at_level(logging.WARNING, logger="context_runtime.client"):
        client = config(payload)

    traces = assemble(client, Providers(), 200)

    assert {(t.rollout, t.shadow, t.documents[KEY]) for t in traces} == {(None, None, 3)}
    assert any(f"rollouts.{KEY} is ignored" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_runner_with_a_tool__rollout__no_extra_model_tool_or_provider_call(config, share):
    """A real ADK Runner, a model that calls a tool, then answers: the same model and tool
    calls with a rollout as without; the providers of the served version only."""
    plain = run_agent_turn(config(rollout_payload(None, share=0.0)))
    rolled = run_agent_turn(config(rollout_payload(READS_MORE, share=share)))

    (model, providers, tools, _), (model_r, providers_r, tools_r, traces_r) = plain, rolled
    assert model.calls == model_r.calls == 2  # the tool round, then the answer
    assert tools == tools_r == ["A1042"]
    # Served old (share 0): exactly the providers of v3; served new (share 1): v3's and memory,
    # once per model call — never a call for the shadow.
    expected = dict(providers.calls)
    if share == 1.0:
        expected["memory"] = 2
    assert dict(providers_r.calls) == expected
    served, other = (3, 4) if share == 0.0 else (4, 3)
    assert [(t.documents[KEY], t.shadow.version) for t in traces_r] == [(served, other)] * 2


def test_unit_missing__the_invocation_is_the_unit__its_model_calls_share_an_arm(config):
    """No principal (unit ``principal``): each invocation is its own unit, so its later model
    calls (request ids ``e-n#2``) are served the version its first call was."""
    client = config(rollout_payload(SMALLER, share=0.5, unit="principal"))
    reporter = Keep()
    assembly = ContextAssembly(
        client=client,
        registry=Providers().registry(),
        strategy_for=by_task,
        reporter=reporter,
        provider_timeout=None,
    )

    async def run():
        for n in range(200):
            for _call in range(2):  # the tool round, then the answer
                context = CallbackContext(invocation_id=f"e-{n}", user_id="")
                await assembly.before_model_callback(context, model_request(n, 0))

    asyncio.run(run())

    traces = reporter.traces
    assert [t.request_id for t in traces[:2]] == ["e-0", "e-0#2"]
    assert all(t.principal == "" for t in traces)
    for first, second in zip(traces[::2], traces[1::2], strict=True):
        assert first.rollout.arm == second.rollout.arm == assign_arm("ro-7", 0.5, first.request_id)
        assert first.documents[KEY] == second.documents[KEY]
    assert {t.rollout.arm for t in traces} == {"new", "old"}


# ---------------------------------------------------------------- the ADK path
# The paired watch after a completed rollout (phase "watch"): everyone served the live v4; the
# sampled tasks also run v3 as shadow and report the pair; nothing else is called.
WATCH_V4 = {**V3, "optional": ["recent_dialogue", "memory"]}


def watch_payload(share: float | None) -> dict:
    """v4 live (the completed rollout's new version); with ``share``, v3 watched as shadow."""
    payload = copy.deepcopy(PAYLOAD)
    payload["strategies"][KEY] = {"version": 4, "body": {**WATCH_V4, "bundles": POLICY_BUNDLE}}
    if share is not None:
        payload["rollouts"] = {
            KEY: {
                "id": "ro-7",
                "phase": "watch",
                "version": 3,
                "body": {**copy.deepcopy(V3), "bundles": POLICY_BUNDLE},
                "share": share,
                "unit": "task",
                "step": 3,
            }  # fmt: skip
        }
    return payload


def test_adk_watch__sampled_tasks_report_the_pair__others_plain__same_provider_calls(config):
    plain_providers, watch_providers = Providers(), Providers()
    plain = assemble(config(watch_payload(None)), plain_providers, 2_000, tasks=600)
    traces = assemble(config(watch_payload(0.1)), watch_providers, 2_000, tasks=600)

    sampled = collections.Counter()
    for trace in traces:
        assert trace.documents[KEY] == 4
        if rollouts.bucket("ro-7", trace.task.id) < 0.1:
            sampled[trace.task.id] += 1
            assert trace.rollout == wire.TraceRollout(id="ro-7", arm="new", step=3)
            assert trace.shadow.version == 3
        else:
            assert trace.rollout is None and trace.shadow is None
    assert 20 < len(sampled) < 110  # about 10% of 600 tasks
    # The shadow decides on live's candidates: not one provider call more.
    assert dict(watch_providers.calls) == dict(plain_providers.calls)
    assert [t.status for t in traces] == [t.status for t in plain]


def test_adk_runner_with_a_tool__watch__no_extra_model_or_tool_call(config):
    model, _, tools, _ = run_agent_turn(config(watch_payload(None)))
    model_w, _, tools_w, _ = run_agent_turn(config(watch_payload(1.0)))

    assert model.calls == model_w.calls == 2
    assert tools == tools_w == ["A1042"]

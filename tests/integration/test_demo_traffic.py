"""Demo traffic through the engine: the demo's traces are the selection engine's.

- after load_demo, req-92 … req-97 have DEMO.md's statuses, and a second run stores nothing;
- replay: every stored trace's decisions are what the engine returns when it runs again on
  the stored candidates (provider outcome, relevance, links) with the stored strategy version;
- demo_traffic as a real process against a real console process: publishing v3 to bank-uat
  changes the traces that follow; SIGTERM stops it after flushing.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from context_runtime.engine import ENGINE, CandidateItem, Strategy, context_sections, select
from django.core.management import call_command
from django.utils import timezone

from console.demo.data import DEMO_MANIFEST
from console.demo.traces import BACKGROUND_COUNT, SUPPORT_TRACES
from strategies.catalog.models import Environment
from strategies.catalog.services import manifest_record
from strategies.documents.models import Version
from strategies.releases.models import ReleaseEvent
from strategies.releases.services import release_publish
from strategies.runtime.models import RuntimeToken
from tests.engines import console_env
from tests.factories.traces import candidates_of
from tests.runtime_sim import ROOT, ConsoleServer, wait_until
from traces.models import Snapshot, Trace

STRATEGY = "after_sales_consultation"
EXPECTED = {  # DEMO.md's trace table
    "req-92": ("sg-test", "ready", ""),
    "req-93": ("sg-test", "degraded", "general_policy_only"),
    "req-94": ("sg-test", "budget_exceeded", ""),
    "req-95": ("sg-test", "source_conflict", ""),
    "req-96": ("prod", "missing_required_data", ""),
    "req-97": ("sg-test", "ready", ""),
}


def load_demo() -> str:
    out = io.StringIO()
    call_command("load_demo", "--quiet-logins", stdout=out)
    return out.getvalue()


def _candidate(trace: Trace, item_id: str):
    """The trace's one stored candidate of this item."""
    (found,) = [c for c in candidates_of(trace) if c.item_id == item_id]
    return found


@pytest.mark.django_db
def test_load_demo__support_traces__demo_statuses_from_engine__second_run_adds_nothing():
    load_demo()

    traces = {
        t.request_id: t
        for t in Trace.objects.filter(request_id__in=EXPECTED).select_related("environment")
    }
    assert {
        request_id: (t.environment.key, t.status, t.degradation) for request_id, t in traces.items()
    } == EXPECTED
    old_chat = _candidate(traces["req-92"], "old-chat")
    assert (old_chat.decision, old_chat.required, old_chat.outcome) == (
        "irrelevant",
        False,
        "fetched",
    )
    assert (
        old_chat.reason == "relevance 0.05 is below the threshold 0.20 (older product introduction)"
    )
    order = _candidate(traces["req-93"], "order:A1042")
    assert order.decision == "not_fetched" and "general_policy_only takes over" in order.reason
    assert _candidate(traces["req-96"], "order:A1042").decision == "no_access"
    # v3 does not allow snapshots (snapshot.allowed is not true): none was kept.
    assert not Snapshot.objects.exists()
    background = Trace.objects.filter(request_id__startswith="bg-")
    assert background.count() > 300
    assert set(background.values_list("environment__key", flat=True)) == {
        "sg-test",
        "bank-uat",
        "prod",
    }
    assert set(background.values_list("status", flat=True)) >= {
        "ready",
        "degraded",
        "budget_exceeded",
        "missing_required_data",
        "source_conflict",
    }

    count = Trace.objects.count()
    assert "Demo traces: 0 new" in load_demo()
    assert Trace.objects.count() == count


@pytest.mark.django_db
def test_load_demo__traces_report_sections__as_the_sdk_does__only_when_the_model_was_called():
    """Issue 32 item 8: the SDK's ContextAssembly reports the contextSections it rendered
    (`wire.Sections`, keys per block) on every request it sent to the model; the demo's
    traffic does too, so the demo's trace pages and their layout tests show what a real
    runtime's do. A request refused before the model call reports none."""
    load_demo()

    traces = Trace.objects.filter(request_id__in=EXPECTED)
    called = {t.request_id for t in traces if t.status in ("ready", "degraded")}
    assert called == {"req-92", "req-93", "req-97"}
    for trace in traces:
        profile = Version.objects.get(
            document__agent__key="assistant_professional",
            document__key="profile",
            number=trace.documents["profile"],
        )
        switched_on = context_sections(profile.body)  # what the profile renders, by block
        assert switched_on["user_context"] and switched_on["query_context"]
        expected = switched_on if trace.request_id in called else None
        assert trace.sections == expected, trace.request_id
    background = Trace.objects.filter(request_id__startswith="bg-", status="ready")
    assert not background.filter(sections__isnull=True).exists()


@pytest.mark.django_db
def test_load_demo__release_history_in_the_past__each_trace_ran_the_version_live_at_its_time():
    """The demo's releases happened days and hours ago (DEMO.md's story: v1 and then v2
    through sg-test, bank-uat and prod; v3 in sg-test since the day before the load), and each
    trace carries the strategy version that was live in its environment when it occurred —
    v2's before v3, v3's after."""
    load_demo()
    moves = list(
        ReleaseEvent.objects.moves()
        .filter(release__document__key=STRATEGY)
        .order_by("occurred_at", "id")
        .values_list("release__environment__key", "to_version__number", "occurred_at")
    )
    assert [(env, version) for env, version, _ in moves] == [
        ("sg-test", 1),
        ("bank-uat", 1),
        ("prod", 1),
        ("sg-test", 2),
        ("bank-uat", 2),
        ("prod", 2),
        ("sg-test", 3),
    ]
    now = timezone.now()
    assert timedelta(days=6) < now - moves[0][2]
    assert timedelta(hours=6) < now - moves[-1][2] < timedelta(days=2)

    def live_at(env_key, when):
        return max((at, v) for e, v, at in moves if e == env_key and at <= when)[1]

    traces = Trace.objects.values_list("environment__key", "occurred_at", "strategy_version")
    assert {(v, live_at(env, at)) for env, at, v in traces} == {(1, 1), (2, 2), (3, 3)}
    sg_test = [at for env, at, _ in traces if env == "sg-test"]
    assert (
        sum(at < moves[-1][2] for at in sg_test) > 100
        and sum(at >= moves[-1][2] for at in sg_test) > 100
    )


@pytest.mark.django_db
def test_demo_traces__replayed_through_engine__same_decisions():
    """Every demo trace carries its replay fields (the selection block; per candidate the
    provider's bundle and a reason code), and the engine given exactly those — nothing
    derived — makes the same decisions, with the same reasons and reason codes."""
    load_demo()
    versions = {
        (v.document.agent_id, v.document.key, v.number): v.body
        for v in Version.objects.select_related("document")
    }
    traces = Trace.objects.filter(strategy=STRATEGY)
    # All of them: the story's and the background's (none before the strategy went live).
    assert traces.count() == Trace.objects.count() > BACKGROUND_COUNT + len(SUPPORT_TRACES)
    for trace in traces:
        assert trace.engine == ENGINE, trace.request_id
        body = versions[(trace.agent_id, trace.strategy, trace.strategy_version)]
        rows = candidates_of(trace)
        candidates = [
            CandidateItem(
                id=c.item_id,
                source=c.source,
                version=c.version,
                size=c.size,
                relevance=c.relevance,
                bundle=c.provider_bundle or None,  # the provider's own, not the decided group
                depends_on=tuple(c.depends_on),
                conflicts_with=tuple(c.conflicts_with),
                outcome=c.outcome,
                note=c.note,
            )
            for c in rows
        ]
        again = select(
            strategy=Strategy.from_body(body),
            candidates=candidates,
            context_window=trace.selection_context_window,
            max_input_tokens=trace.selection_max_input_tokens,
            fixed_input_tokens=trace.fixed_input_tokens,
            relevance_threshold=trace.relevance_threshold,
        )
        assert (again.status, again.degradation or "") == (trace.status, trace.degradation)
        assert again.max_input_tokens == trace.budget_max_input_tokens
        assert again.input_estimate == trace.input_estimate
        assert [
            (d.id, d.decision, d.reason, d.reason_code, d.required, d.bundle or "")
            for d in again.decisions
        ] == [
            (c.item_id, c.decision, c.reason, c.reason_code, c.required, c.bundle) for c in rows
        ], trace.request_id


@pytest.mark.django_db(transaction=True)
def test_demo_traffic__real_console__publish_v3_to_bank_uat__next_traces_carry_v3(
    settings, tmp_path
):
    from django.contrib.auth import get_user_model

    load_demo()
    env = console_env(
        CONSOLE_DEMO_TOKEN_FILE=str(tmp_path / "demo-runtime-token"),
    )
    console = ConsoleServer(env, log_path=tmp_path / "console.log").start()
    command = [sys.executable, "manage.py", "demo_traffic", "--console", console.url]
    traffic = None
    try:
        once = subprocess.run(
            [*command, "--once", "2", "--interval", "0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert once.returncode == 0, once.stderr
        live = Trace.objects.filter(request_id__startswith="live-")
        assert sorted(live.values_list("environment__key", "strategy_version")) == sorted(
            [("sg-test", 3), ("bank-uat", 2), ("prod", 2)] * 2
        )
        assert (
            RuntimeToken.objects.filter(
                name__startswith="demo traffic (", revoked_at__isnull=True
            ).count()
            == 3
        )

        traffic = subprocess.Popen(
            [*command, "--interval", "0.2", "--poll", "0.5"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        bank_uat = Trace.objects.filter(request_id__startswith="live-bank-uat-")
        seen = bank_uat.count()
        assert wait_until(lambda: bank_uat.count() > seen, timeout=30, interval=0.2)
        # The runtime of bank-uat catches up on the handler; then v3 may go live there.
        uat = Environment.objects.get(key="bank-uat")
        manifest_record(environment=uat, body=DEMO_MANIFEST, runtime="bank-assistant 2026.12.1")
        v3 = Version.objects.get(document__key=STRATEGY, number=3)
        ops = get_user_model().objects.get(username="ops")
        release_publish(version=v3, environment=uat, actor=ops, reason="handler implemented")
        assert wait_until(
            lambda: bank_uat.filter(strategy_version=3).exists(), timeout=30, interval=0.2
        )

        traffic.send_signal(signal.SIGTERM)
        out, err = traffic.communicate(timeout=30)
        assert traffic.returncode == 0, err
        assert "demo traffic bank-uat: stopped after" in out
        assert "0 dropped" in out and ", 0 rejected" in out
    finally:
        if traffic is not None and traffic.poll() is None:
            traffic.kill()
            traffic.wait()
        console.stop()
    # The second run reused the first run's three tokens (their secrets are kept beside the
    # demo token file): nothing was revoked, nothing added.
    traffic_tokens = RuntimeToken.objects.filter(name__startswith="demo traffic (")
    assert (traffic_tokens.count(), traffic_tokens.filter(revoked_at__isnull=False).count()) == (
        3,
        0,
    )


def _demo_start(token_file) -> str:
    """What `make run` does with the database: load_demo, then demo_traffic (here against an
    address where nothing answers, one request each: its runtimes hold no configuration)."""
    load_demo()
    out = io.StringIO()
    call_command(
        "demo_traffic",
        "--console",
        "http://127.0.0.1:9",
        "--once",
        "1",
        "--interval",
        "0",
        "--wait-ready",
        "0",
        stdout=out,
    )
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_demo_traffic__archived_environment__skipped_said_once_no_token_there(
    tmp_path, monkeypatch
):
    from django.contrib.auth import get_user_model

    from strategies.catalog.services import environment_archive

    monkeypatch.setenv("CONSOLE_DEMO_TOKEN_FILE", str(tmp_path / "demo-runtime-token"))
    load_demo()
    scratch = Environment.objects.create(key="scratch", name="Scratch", position=9)
    admin = get_user_model().objects.get(username="admin")
    environment_archive(environment=scratch, actor=admin, reason="not used any more")

    out = _demo_start(tmp_path)

    assert out.count("skips archived environments: scratch.") == 1
    assert "demo traffic sg-test: stopped after" in out
    assert "demo traffic scratch" not in out
    assert not RuntimeToken.objects.filter(environment=scratch).exists()


@pytest.mark.django_db(transaction=True)
def test_two_starts__same_demo_tokens__no_revoked_rows_added(tmp_path, monkeypatch):
    monkeypatch.setenv("CONSOLE_DEMO_TOKEN_FILE", str(tmp_path / "demo-runtime-token"))
    _demo_start(tmp_path)
    tokens = RuntimeToken.objects.filter(name__startswith="demo ")
    first = set(tokens.filter(revoked_at__isnull=True).values_list("pk", flat=True))
    revoked = tokens.filter(revoked_at__isnull=False).count()

    _demo_start(tmp_path)

    assert set(tokens.filter(revoked_at__isnull=True).values_list("pk", flat=True)) == first
    assert len(first) == 4  # the sg-test demo runtime's and one per environment's traffic
    assert tokens.filter(revoked_at__isnull=False).count() == revoked
    assert (tmp_path / "demo-traffic-token-prod").stat().st_mode & 0o777 == 0o600


@pytest.mark.django_db(transaction=True)
def test_demo_traffic__spools_in_the_data_directory__never_the_users_state_directory(
    tmp_path, monkeypatch
):
    # Durable as the SDK's default (issue 32.1), but where `make stop` and a new data directory
    # reach it: beside the token file, one spool per environment.
    monkeypatch.setenv("CONSOLE_DEMO_TOKEN_FILE", str(tmp_path / "demo-runtime-token"))
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))

    _demo_start(tmp_path)

    assert (tmp_path / "demo-traffic-spool-sg-test").is_dir()
    assert (tmp_path / "demo-traffic-spool-prod").is_dir()
    assert not state.exists() or not any(state.rglob("*"))

"""The manifest reporter (RUNTIME_API §2): what the runtime registered in code is what it
declares, and reporting it never breaks the runtime's start-up."""

from __future__ import annotations

import logging
import time

import pytest
from context_runtime.documents import validate_document
from context_runtime.manifest_report import (
    ManifestReporter,
    ManifestReportError,
    Registry,
    report_manifest,
    report_manifest_in_background,
)
from fake_console import HANG, PATIENT, TOKEN, FakeConsole, dead_url

RUNTIME = "bank-assistant 2026.11.3"


def fetch_order(request):
    return {"order": request}


def bank_registry() -> Registry:
    registry = Registry()
    for source in ("task_state", "order_delivery", "applicable_policy", "recent_dialogue"):
        registry.register_provider(source, fetch_order if source == "order_delivery" else None)

    @registry.tool("lookup_order")
    def lookup_order(order_id):
        return order_id

    registry.register_tool("search_policy")
    registry.register_handler("general_policy_only", lambda request: None)
    registry.register_section("high_level_profile", "user_context", sensitive=False)
    registry.register_section("personal_particulars", "user_context")
    for switch in ("temporalAnchor.enabled", "toolPrefilter.enabled"):
        registry.register_switch(switch)
    return registry


def test_registry__registered_code__declared_in_manifest_body():
    registry = bank_registry()

    body = registry.manifest_body(RUNTIME)

    assert body == {
        "runtime": RUNTIME,
        "providers": ["applicable_policy", "order_delivery", "recent_dialogue", "task_state"],
        "tools": ["lookup_order", "search_policy"],
        "handlers": ["general_policy_only"],
        "sections": [
            {"key": "high_level_profile", "block": "user_context", "sensitive": False},
            {"key": "personal_particulars", "block": "user_context", "sensitive": True},
        ],
        "switches": ["temporalAnchor.enabled", "toolPrefilter.enabled"],
        # ContextAssembly runs the payload's shadows, rollouts and paired watches: a runtime
        # on the SDK says so.
        "features": ["shadow", "split", "watch"],
    }
    assert registry.get_provider("order_delivery") is fetch_order
    assert registry.get_tool("lookup_order")("A1") == "A1"


def test_registry__manifest__checks_strategies_against_this_runtime():
    manifest = bank_registry().manifest(RUNTIME)
    body = {"required": ["task_state", "inventory"], "budget": {"max_input_tokens": 1000}}

    findings = validate_document("strategy", body, manifest)

    assert [(f.path, f.code) for f in findings] == [("required[1]", "unknown_source")]


def test_registry__same_name_other_function__raises():
    registry = Registry()
    registry.register_provider("task_state", fetch_order)
    registry.register_provider("task_state", fetch_order)  # same function: harmless

    with pytest.raises(ValueError, match="already registered"):
        registry.register_provider("task_state", lambda request: None)


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.register_provider("", None),
        lambda r: r.register_section("x", "other_block"),
        lambda r: r.register_switch("  "),
    ],
)
def test_registry__invalid_name_or_block__raises(call):
    with pytest.raises(ValueError):
        call(Registry())


def test_registry__section_known_sensitive_declared_not__stays_sensitive(caplog):
    registry = Registry()

    registry.register_section("user_emails", "user_context", sensitive=False)

    assert registry.manifest_body("r")["sections"][0]["sensitive"] is True
    assert "sensitive by document 000" in caplog.text


def test_manifest_report__console_up__puts_manifest_and_returns_version(console):
    result = report_manifest(console.url, TOKEN, bank_registry(), RUNTIME)

    assert result.version == 1
    assert result.warnings == []
    assert console.manifests == [bank_registry().manifest_body(RUNTIME)]


def test_manifest_report__warnings__returned_and_logged(console, caplog):
    console.manifest_warnings = [
        {
            "agent": "assistant_professional",
            "document": "after_sales_consultation",
            "version": 3,
            "errors": [{"path": "allowed_tools[1]", "code": "unknown_tool", "message": "..."}],
        }
    ]

    result = report_manifest(console.url, TOKEN, bank_registry(), RUNTIME)

    assert result.warnings[0]["document"] == "after_sales_consultation"
    assert "no longer supported" in caplog.text


def test_manifest_report__console_fails_twice__retries_and_succeeds(console):
    console.fail_next["manifest"] = [500, 503]

    result = report_manifest(
        console.url, TOKEN, bank_registry(), RUNTIME, backoff_initial=0.01, backoff_max=0.02
    )

    assert result.version == 1
    assert len(console.manifests) == 1


def test_manifest_report__console_down__returns_none_without_raising():
    started = time.monotonic()

    result = report_manifest(
        dead_url(), TOKEN, bank_registry(), RUNTIME, attempts=3, backoff_initial=0.01
    )

    assert result is None
    assert time.monotonic() - started < 1.0


def test_manifest_report__console_down_and_raise_asked__raises():
    with pytest.raises(ManifestReportError, match="cannot reach"):
        report_manifest(
            dead_url(),
            TOKEN,
            bank_registry(),
            RUNTIME,
            attempts=2,
            backoff_initial=0.01,
            raise_on_failure=True,
        )


def test_manifest_report__refused_400__not_retried(console, caplog):
    console.fail_next["manifest"] = [400, 400, 400]
    caplog.set_level(logging.ERROR, logger="context_runtime.manifest")

    result = report_manifest(console.url, TOKEN, bank_registry(), RUNTIME, backoff_initial=0.01)

    assert result is None
    assert console.fail_next["manifest"] == [400, 400]  # asked once
    assert "HTTP 400" in caplog.text


def test_manifest_report__console_slow__bounded_by_timeout(console):
    console.modes["manifest"] = HANG

    started = time.monotonic()
    result = report_manifest(console.url, TOKEN, bank_registry(), RUNTIME, timeout=0.2, attempts=1)

    assert result is None
    assert time.monotonic() - started < 1.0


def test_manifest_report__in_background__start_up_not_blocked(console):
    console.modes["manifest"] = HANG
    console.hang_seconds = 0.5

    started = time.monotonic()
    thread = report_manifest_in_background(
        console.url, TOKEN, bank_registry(), RUNTIME, timeout=2.0, attempts=1
    )

    assert time.monotonic() - started < 0.25  # the console answers only after 0.5 s
    thread.join(3)
    assert len(console.manifests) == 1


# ---------------------------------------------------------------- retried until it lands (21.6)


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def manifest_reporters():
    made = []
    yield made
    for reporter in made:
        reporter.stop()


def fast(url, registry, made, **options):
    settings = {"backoff_initial": 0.02, "backoff_max": 0.1, "debounce": 0.01, "timeout": PATIENT}
    settings.update(options)
    reporter = ManifestReporter(url, TOKEN, registry, RUNTIME, **settings)
    made.append(reporter)
    return reporter.start()


def test_manifest_reporter__console_down_at_start__retries_until_it_lands(manifest_reporters):
    url = dead_url()
    reporter = fast(url, bank_registry(), manifest_reporters)
    assert wait_for(lambda: reporter.status()["failures"] >= 3)
    assert reporter.status()["reported"] is False

    console = FakeConsole(port=int(url.rsplit(":", 1)[1]))  # the console comes up
    try:
        assert reporter.join(5.0)
        assert reporter.status()["reported"] is True
        assert reporter.status()["version"] == 1
        assert console.manifests == [bank_registry().manifest_body(RUNTIME)]
    finally:
        console.close()


def test_manifest_reporter__registry_changes__sent_again_once(console, manifest_reporters):
    registry = bank_registry()
    reporter = fast(console.url, registry, manifest_reporters)
    assert reporter.join(3.0) and len(console.manifests) == 1

    registry.register_tool("refund_order")
    registry.register_switch("newSwitch.enabled")  # a burst: one report for both

    assert wait_for(lambda: len(console.manifests) == 2)
    assert "refund_order" in console.manifests[-1]["tools"]
    assert wait_for(lambda: reporter.status()["reported"])
    registry.register_tool("refund_order")  # nothing new
    time.sleep(0.2)
    assert len(console.manifests) == 2
    assert reporter.status()["version"] == 2


def test_manifest_reporter__5xx_then_ok__backoff_with_jitter_bounded(console, manifest_reporters):
    console.fail_next["manifest"] = [500, 503, 502, 500]

    started = time.monotonic()
    reporter = fast(console.url, bank_registry(), manifest_reporters, backoff_max=0.1)

    assert reporter.join(3.0)
    assert len(console.manifests) == 1
    # four waits, each at most backoff_max: the bound holds, the retries are not hot (≥ half a step)
    assert 0.01 * 4 <= time.monotonic() - started < 2.0


def test_manifest_reporter__invalid_manifest_refused__waits_for_a_change(
    console, manifest_reporters
):
    console.fail_next["manifest"] = [400]
    registry = bank_registry()
    reporter = fast(console.url, registry, manifest_reporters)

    assert reporter.join(3.0)
    time.sleep(0.2)
    status = reporter.status()
    assert (status["refused"], status["reported"]) == (True, False)
    assert console.manifests == []  # asked once, not again

    registry.register_tool("fixed_tool")

    assert wait_for(lambda: reporter.status()["reported"])
    assert len(console.manifests) == 1


def test_manifest_reporter__token_refused__unauthorized_and_slow(console, manifest_reporters):
    console.token = "cc_rt_revoked"
    reporter = fast(
        console.url, bank_registry(), manifest_reporters, auth_backoff_initial=0.5, backoff_max=1.0
    )
    assert wait_for(lambda: reporter.status()["unauthorized"])

    console.token = TOKEN

    assert wait_for(lambda: reporter.status()["reported"], timeout=5.0)
    assert reporter.status()["unauthorized"] is False


# ---------------------------------------------------------------- refused: it breaks live (issue 32)

BREAKS_LIVE = (
    409,
    "manifest_breaks_live",
    "Manifest refused: the sg-test runtime that sent it could not serve what is live there "
    "(assistant_professional after_sales_consultation v3).",
    [
        {
            "path": "on_missing.order_delivery",
            "code": "unknown_handler",
            "message": "assistant_professional after_sales_consultation v3 (live): the runtime "
            "does not implement the handler general_policy_only",
        }
    ],
)


def test_manifest_report__breaks_live_409__asked_once_logged_with_each_finding(console, caplog):
    console.manifest_refusal = BREAKS_LIVE
    caplog.set_level(logging.ERROR, logger="context_runtime.manifest")

    with pytest.raises(ManifestReportError) as refused:
        report_manifest(
            console.url,
            TOKEN,
            bank_registry(),
            RUNTIME,
            backoff_initial=0.01,
            raise_on_failure=True,
            instance_id="pod-7:4242",
        )

    assert (refused.value.status, refused.value.code) == (409, "manifest_breaks_live")
    assert console.manifest_instances == ["pod-7:4242"]  # asked once, naming the process
    assert "manifest_breaks_live" in caplog.text
    assert "on_missing.order_delivery: assistant_professional" in caplog.text
    assert "general_policy_only" in caplog.text


def test_manifest_reporter__breaks_live_409__refused_not_retried_loud(
    console, manifest_reporters, caplog
):
    console.manifest_refusal = BREAKS_LIVE
    caplog.set_level(logging.ERROR, logger="context_runtime.manifest")
    reporter = fast(console.url, bank_registry(), manifest_reporters)

    assert reporter.join(3.0)
    time.sleep(0.3)  # several backoff_max periods: a retry would have come by now

    status = reporter.status()
    assert (status["refused"], status["reported"], status["unauthorized"]) == (True, False, False)
    assert len(console.manifest_instances) == 1
    assert "general_policy_only" in status["last_error"]
    assert [r.levelname for r in caplog.records if "refused" in r.getMessage()] == ["ERROR"]


def test_manifest_report__default_instance__host_and_pid(console):
    import os
    import socket

    report_manifest(console.url, TOKEN, bank_registry(), RUNTIME)

    assert console.manifest_instances == [f"{socket.gethostname()}:{os.getpid()}"]

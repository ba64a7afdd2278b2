"""Impact previews on the demo world (issue 20, item 1): a draft of after_sales_consultation
replayed on the retained traces of an environment against what is live there, by a real
Celery worker or by the run the task drives; what each bad input gets."""

from __future__ import annotations

import copy
import html
import threading
import time
from collections import Counter
from datetime import timedelta

import msgspec
import pytest
from context_runtime import replay as engine_replay
from context_runtime import wire
from context_runtime.engine import Strategy
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from console.kernel.errors import ApplicationError, Forbidden, NotFound
from console.kernel.models import AccessLogEntry
from strategies.catalog.models import Environment
from strategies.documents import services as documents
from strategies.documents.models import Document, Version
from strategies.releases.models import Release
from tests.factories import post_batch, runtime_token, trace_payload
from tests.factories.traces import candidates_of
from traces import compact
from traces.models import Trace
from traces.previews import report, selectors, services
from traces.previews.models import Preview

STRATEGY = "after_sales_consultation"
AGENT = "assistant_professional"
# The demo world comes with one preview: the saved one of ops' waiting prod request.
DEMO_PREVIEWS = 1


# --- helpers ------------------------------------------------------------------------------------
def _strategy() -> Document:
    return Document.objects.get(agent__key=AGENT, key=STRATEGY)


def _draft(**budget) -> Version:
    """A draft of the demo strategy: v3 with another budget (or other changes)."""
    body = copy.deepcopy(Version.objects.get(document=_strategy(), number=3).body)
    body["budget"].update(budget)
    return documents.draft_create(document=_strategy(), body=body, actor=None, note="preview")


def _draft_body(body: dict) -> Version:
    Version.objects.filter(document=_strategy(), state=Version.State.DRAFT).delete()
    return documents.draft_create(document=_strategy(), body=body, actor=None, note="preview")


def _env(key: str) -> Environment:
    return Environment.objects.get(key=key)


def _run(preview: Preview) -> Preview:
    """What the Celery task does, in this process."""
    services.preview_execute(preview.pk)
    preview.refresh_from_db()
    return preview


def _wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def _becoming(report: dict, status: str) -> tuple[int, set[str]]:
    """Traces that take `status` with the new version and did not have it with the live one."""
    count, ids = 0, set()
    for old, row in report["status_matrix"].items():
        cell = row.get(status)
        if cell and old != status:
            count += cell["count"]
            ids |= set(cell["ids"])
    return count, ids


def _brute_force(environment: str, body: dict) -> dict[str, tuple[str, str]]:
    """Every trace of the strategy in `environment`: its stored candidates (decoded from the
    trace's row, as the runtime sent them) and `select()` run with `body` and the trace's selection block —
    {request_id: (recorded status, new status)}, independent of the preview's code."""
    strategy = Strategy.from_body(body)
    live = Release.objects.get(document=_strategy(), environment__key=environment).version
    needed = strategy.sources | Strategy.from_body(live.body).sources
    asked = {v.number: Strategy.from_body(v.body).sources for v in _strategy().versions.all()}
    found = {}
    traces = Trace.objects.filter(environment__key=environment, strategy=STRATEGY)
    for trace in traces:
        if not needed <= asked[trace.strategy_version]:
            # Not previewable, counted apart: its version never asked a source the live or the
            # new version reads (the demo's v1 and v2 traces, before v3 read recent_dialogue).
            continue
        candidates = engine_replay.trace_candidates(c.wire for c in candidates_of(trace))
        selection = engine_replay.replay(
            strategy,
            candidates,
            wire.SelectionInfo(
                engine=trace.engine,
                fixed_input_tokens=trace.fixed_input_tokens,
                relevance_threshold=trace.relevance_threshold,
                context_window=trace.selection_context_window,
                max_input_tokens=trace.selection_max_input_tokens,
            ),
        )
        found[trace.request_id] = (trace.status, selection.status)
    return found


def _restore_candidates(trace: Trace, change, positions=None) -> None:
    """Store `trace`'s candidates again with `change` applied (to those at `positions`, or
    all): what an older runtime or an odd provider would have sent."""
    altered = [
        change(c.wire) if positions is None or c.position in positions else c.wire
        for c in candidates_of(trace)
    ]
    Trace.objects.filter(pk=trace.pk, occurred_at=trace.occurred_at).update(
        packed_candidates=compact.encode(altered)
    )


def _report_row(trace_id: int, c) -> tuple:
    """A stored candidate in `report.CANDIDATE_COLUMNS` order, read through the ORM's names
    (words left out as "", links as lists): independent of the preview's own reader."""
    return (trace_id, *(getattr(c, column) for column in report.CANDIDATE_COLUMNS[1:]))


@pytest.fixture
def ops(demo_world):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="ops")


@pytest.fixture
def worker_queue(celery_worker_process, settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_worker_process
    return celery_worker_process


# --- the demo's story ---------------------------------------------------------------------------
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_preview__draft_budget_4000_on_sg_test_by_the_worker__lists_exactly_the_traces_that_become_budget_exceeded(  # noqa: E501
    ops, worker_queue, client
):
    draft = _draft(max_input_tokens=4000)
    preview, reused = services.preview_request(
        actor=ops, version=draft, environment=_env("sg-test")
    )
    assert not reused

    _wait_for(lambda: Preview.objects.get(pk=preview.pk).state == Preview.State.COMPLETE)

    preview.refresh_from_db()
    report = preview.report
    brute = _brute_force("sg-test", draft.body)
    expected = {rid for rid, (old, new) in brute.items() if new == "budget_exceeded" != old}
    count, listed = _becoming(report, "budget_exceeded")
    assert report["fidelity"]["share"] == 1.0 and not report["withheld"]
    assert report["previewed"] == len(brute) and preview.traces_done == report["traces_read"]
    assert count == len(expected) > 0
    # The cell keeps its full count and the first 50 request ids (in trace order).
    cells = [
        row["budget_exceeded"]
        for old, row in report["status_matrix"].items()
        if old != "budget_exceeded" and "budget_exceeded" in row
    ]
    assert listed <= expected
    assert all(len(cell["ids"]) == min(cell["count"], 50) for cell in cells)
    client.force_login(ops)
    page = client.get(reverse("preview-detail", args=[AGENT, preview.pk])).content.decode()
    ready = report["status_matrix"]["ready"]["budget_exceeded"]["count"]
    assert f'data-old="ready" data-new="budget_exceeded" data-count="{ready}"' in page


@pytest.mark.django_db
def test_preview__draft_budget_6000__status_matrix_equals_a_brute_force_engine_run(ops):
    # Not the "6000: no status change": the demo's runtime gives select() 2,000 fixed
    # input tokens, so 5,000 available leave no room for the required items of the larger
    # requests — the brute force says which, and the preview must say exactly the same.
    draft = _draft(max_input_tokens=6000)
    preview, _ = services.preview_request(actor=ops, version=draft, environment=_env("sg-test"))

    report = _run(preview).report

    brute = Counter(_brute_force("sg-test", draft.body).values())
    matrix = {
        (old, new): cell["count"]
        for old, row in report["status_matrix"].items()
        for new, cell in row.items()
    }
    assert report["fidelity"]["share"] == 1.0
    assert matrix == dict(brute)
    assert matrix[("ready", "budget_exceeded")] > 0


@pytest.mark.django_db
def test_preview__draft_budget_7000__no_status_change_but_changed_decisions_listed(ops, client):
    draft = _draft(max_input_tokens=7000)
    preview, _ = services.preview_request(actor=ops, version=draft, environment=_env("sg-test"))

    report = _run(preview).report

    assert preview.state == Preview.State.COMPLETE
    assert report["fidelity"]["share"] == 1.0
    assert all(old == new for old, new in _brute_force("sg-test", draft.body).values())
    assert all(old == new for old, row in report["status_matrix"].items() for new in row)
    assert report["changed"]["count"] > 0
    dropped = report["sources"]["recent_dialogue"]["optional_dropped"]
    assert set(dropped) == {"over_budget_optional"}
    client.force_login(ops)
    page = client.get(reverse("preview-detail", args=[AGENT, preview.pk])).content.decode()
    assert f'Decisions change in <a href="#ids-changed">{report["changed"]["count"]}</a>' in page
    # The per-source table says why in words; the reason code is one hover away
    assert (
        '<td data-code="over_budget_optional"><span class="help-term" title="reason code '
        'over_budget_optional">optional, and the budget was full</span></td>' in page
    )
    assert '<td class="mono">over_budget_optional</td>' not in page
    assert "recent_dialogue: Optional items dropped — optional, and the budget was full" in page
    # and the replay's trust in words, the share ("fidelity") in a title
    assert "Yes: replaying the versions the runtimes used reproduced what they decided" in page
    assert "<h2>Fidelity</h2>" not in page


@pytest.mark.django_db
def test_preview__version_needing_a_source_prod_never_fetched__that_source_not_previewable(
    ops, client
):
    # prod runs v2 (v1 before it), neither of which reads recent_dialogue; this draft requires it.
    body = copy.deepcopy(Version.objects.get(document=_strategy(), number=3).body)
    body["required"] = [*body["required"], "recent_dialogue"]
    body["optional"] = [s for s in body["optional"] if s != "recent_dialogue"]
    draft = _draft_body(body)
    preview, _ = services.preview_request(actor=ops, version=draft, environment=_env("prod"))

    report = _run(preview).report

    entry = report["not_previewable"]["sources"]["recent_dialogue"]
    prod_traces = Trace.objects.filter(environment__key="prod", strategy=STRATEGY).count()
    assert (entry["traces"], entry["with_candidates"], entry["recorded_versions"]) == (
        prod_traces,
        0,
        [1, 2],
    )
    assert report["previewed"] == 0 and not report["status_matrix"]
    client.force_login(ops)
    page = client.get(reverse("preview-detail", args=[AGENT, preview.pk])).content.decode()
    assert (
        f"recent_dialogue</strong>: 0 of {prod_traces} traces have candidates — the runtime "
        "never requested it under v1, v2" in html.unescape(page)
    )


# --- bad input ----------------------------------------------------------------------------------
@pytest.mark.django_db
def test_preview__environment_with_nothing_live__refused_no_live_version(ops):
    empty = Environment.objects.create(key="eu-test", name="EU test", position=9)
    with pytest.raises(ApplicationError) as refused:
        services.preview_request(
            actor=ops, version=_draft(max_input_tokens=4000), environment=empty
        )
    assert refused.value.code == "no_live_version"
    assert Preview.objects.count() == DEMO_PREVIEWS


@pytest.mark.django_db
def test_preview__window_without_traces__refused_no_traces(ops):
    end = timezone.now().replace(second=0, microsecond=0)
    with pytest.raises(ApplicationError) as refused:
        services.preview_request(
            actor=ops,
            version=_draft(max_input_tokens=4000),
            environment=_env("sg-test"),
            window_start=end - timedelta(minutes=5),  # the newest sg-test trace is 9 min old
            window_end=end,
        )
    assert refused.value.code == "no_traces"
    assert "nothing to replay" in refused.value.message


@pytest.mark.django_db
def test_preview__traces_of_an_old_runtime__counted_not_previewable_never_compared(ops, client):
    old = list(  # of the live version, v3: previewable but for the missing replay fields
        Trace.objects.filter(
            environment__key="sg-test", strategy=STRATEGY, strategy_version=3
        ).order_by("id")[:5]
    )
    Trace.objects.filter(pk__in=[t.pk for t in old]).update(
        engine="", fixed_input_tokens=None, relevance_threshold=None
    )
    preview, _ = services.preview_request(
        actor=ops, version=_draft(max_input_tokens=4000), environment=_env("sg-test")
    )

    report = _run(preview).report

    assert report["not_previewable"]["no_replay_fields"]["count"] == 5
    assert set(report["not_previewable"]["no_replay_fields"]["ids"]) == {t.request_id for t in old}
    # The previewable ones are v3's (v1's and v2's never asked recent_dialogue), but these 5.
    v3 = Trace.objects.filter(environment__key="sg-test", strategy=STRATEGY, strategy_version=3)
    assert report["previewed"] == v3.count() - 5 < report["traces_read"]
    client.force_login(ops)
    page = client.get(reverse("preview-detail", args=[AGENT, preview.pk])).content.decode()
    assert "5 traces from runtimes that do not record replay fields" in page


@pytest.mark.django_db
def test_preview__v3_in_bank_uat_without_its_handler__refused_with_the_manifest_findings(
    ops, client
):
    # bank-uat's runtime does not implement general_policy_only, which v3 uses.
    v3 = Version.objects.get(document=_strategy(), number=3)
    with pytest.raises(ApplicationError) as refused:
        services.preview_request(actor=ops, version=v3, environment=_env("bank-uat"))
    assert refused.value.code == "not_publishable"
    assert "general_policy_only" in refused.value.message

    client.force_login(ops)
    response = client.post(
        reverse("preview-new", args=[AGENT, STRATEGY]),
        {"version": "3", "environment": "bank-uat", "days": "7"},
    )
    assert response.status_code == 400
    assert "general_policy_only" in response.content.decode()
    assert Preview.objects.count() == DEMO_PREVIEWS


@pytest.mark.django_db
def test_preview__window_older_than_retention__refused_window_beyond_retention(ops):
    sg_test = _env("sg-test")
    now = timezone.now()
    with pytest.raises(ApplicationError) as refused:
        services.preview_request(
            actor=ops,
            version=_draft(max_input_tokens=4000),
            environment=sg_test,
            window_start=now - timedelta(days=sg_test.trace_retention_days + 1),
            window_end=now,
        )
    assert refused.value.code == "window_beyond_retention"
    assert f"keeps traces for {sg_test.trace_retention_days} days" in refused.value.message


@pytest.mark.django_db
def test_preview__cancelled_mid_run__shown_cancelled_with_what_it_covered(ops, client, monkeypatch):
    monkeypatch.setattr(selectors, "BATCH_TRACES", 20)
    preview, _ = services.preview_request(
        actor=ops, version=_draft(max_input_tokens=4000), environment=_env("sg-test")
    )
    Preview.objects.filter(pk=preview.pk).update(cancel_requested=True)  # asked while queued…
    Preview.objects.filter(pk=preview.pk).update(state=Preview.State.QUEUED)  # …as it started

    _run(preview)

    assert preview.state == Preview.State.CANCELLED and preview.report is None
    assert preview.traces_done == 20 < preview.traces_total
    client.force_login(ops)
    page = client.get(reverse("preview-detail", args=[AGENT, preview.pk])).content.decode()
    assert 'data-state="cancelled"' in page and "Cancelled: this preview is not complete" in page
    assert f"It covered 20 of {preview.traces_total} traces, up to" in page
    assert 'id="status-matrix"' not in page


@pytest.mark.django_db
def test_preview__worker_lost_mid_run__shown_failed_with_what_it_covered_and_not_rerun(ops, client):
    preview, _ = services.preview_request(
        actor=ops, version=_draft(max_input_tokens=4000), environment=_env("sg-test")
    )
    lost_at = timezone.now() - timedelta(minutes=3)
    Preview.objects.filter(pk=preview.pk).update(
        state=Preview.State.RUNNING, started_at=lost_at, heartbeat_at=lost_at, traces_done=40
    )
    client.force_login(ops)
    page = client.get(reverse("preview-detail", args=[AGENT, preview.pk])).content.decode()
    assert 'data-state="failed"' in page and "stopped responding" in page
    assert f"It covered 40 of {preview.traces_total} traces" in page

    # The message comes back to another worker (late acks): it marks the preview failed.
    assert services.preview_execute(preview.pk) == "skipped"
    preview.refresh_from_db()
    assert preview.state == Preview.State.FAILED and preview.report is None
    # Asking again for the same inputs starts a new preview: a failed one is never reused.
    again, reused = services.preview_request(
        actor=ops,
        version=preview.version,
        environment=preview.environment,
        window_start=preview.window_start,
        window_end=preview.window_end,
    )
    assert not reused and again.pk != preview.pk


@pytest.mark.django_db
def test_preview__same_inputs_twice__second_request_reuses_the_first(ops):
    draft = _draft(max_input_tokens=4000)
    # The default window is the last 7 days to the minute; a slow run may cross a minute
    # (then the second request has other inputs: newer traces), so both name one window.
    start, end = services.default_window()
    same = {"window_start": start, "window_end": end}
    first, reused_first = services.preview_request(
        actor=ops, version=draft, environment=_env("sg-test"), **same
    )
    _run(first)

    second, reused_second = services.preview_request(
        actor=ops, version=draft, environment=_env("sg-test"), **same
    )

    assert (reused_first, reused_second) == (False, True)
    assert second.pk == first.pk and Preview.objects.count() == DEMO_PREVIEWS + 1
    rows = AccessLogEntry.objects.filter(
        action="preview.request", detail__environment="sg-test"
    ).order_by("id")
    assert [row.detail["reused"] for row in rows] == [False, True]


@pytest.mark.django_db
def test_preview__traces_stored_in_the_window_later__not_replayed_and_asking_again_covers_them(
    ops, client
):
    # Given a preview of the default window, asked for and not yet run
    draft, sg_test = _draft(max_input_tokens=4000), _env("sg-test")
    first, _ = services.preview_request(actor=ops, version=draft, environment=sg_test)
    counted = sum(first.window_by_status.values())
    assert first.window_end <= first.requested_at  # it names no time that has not happened

    # When a runtime reports two traces of the window late, before the preview runs
    late = (first.window_end - timedelta(hours=1)).isoformat()
    response = post_batch(
        client,
        runtime_token(sg_test),
        [trace_payload(f"late-{n}", occurred_at=late) for n in range(2)],
    )
    assert response.status_code == 200 and response.json()["accepted"] == 2
    _run(first)

    # Then the preview replayed exactly the traces it counted and says so
    assert first.report["traces_read"] == first.report["window"]["in_window"] == counted
    assert first.report["window"]["stored_by"] == first.requested_at.isoformat()
    client.force_login(ops)
    page = client.get(reverse("preview-detail", args=[AGENT, first.pk])).content.decode()
    assert "traces stored by" in page
    # and asking again for that window is a new preview that covers them; once more, reused
    window = {"window_start": first.window_start, "window_end": first.window_end}
    second, reused = services.preview_request(
        actor=ops, version=draft, environment=sg_test, **window
    )
    assert not reused and second.pk != first.pk
    assert sum(second.window_by_status.values()) == counted + 2
    third, reused = services.preview_request(
        actor=ops, version=draft, environment=sg_test, **window
    )
    assert reused and third.pk == second.pk


@pytest.mark.django_db
def test_preview__user_without_trace_rights__refused_and_logged(demo_world, make_user, client):
    # The viewer role reads configuration, not traces.
    viewer = make_user("viewer1", viewer=AGENT)
    with pytest.raises(Forbidden):
        services.preview_request(
            actor=viewer, version=_draft(max_input_tokens=4000), environment=_env("sg-test")
        )
    assert Preview.objects.count() == DEMO_PREVIEWS
    refusal = AccessLogEntry.objects.filter(actor_label="viewer1").order_by("-id").first()
    assert refusal is not None and refusal.outcome == "denied"

    client.force_login(viewer)
    response = client.post(
        reverse("api-preview-create"),
        {"agent": AGENT, "document": STRATEGY, "version": 3, "environment": "sg-test"},
        content_type="application/json",
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"]


@pytest.mark.django_db
def test_preview_side_by_side__a_trace_that_becomes_budget_exceeded__both_selections_shown(
    ops, client
):
    preview, _ = services.preview_request(
        actor=ops, version=_draft(max_input_tokens=4000), environment=_env("sg-test")
    )
    _, ids = _becoming(_run(preview).report, "budget_exceeded")
    request_id = sorted(ids)[0]
    client.force_login(ops)

    page = client.get(
        reverse("preview-sidebyside", args=[AGENT, preview.pk, request_id])
    ).content.decode()

    assert request_id in page and "budget_exceeded" in page
    with pytest.raises(NotFound):
        selectors.preview_side_by_side(preview=preview, request_id="req-96")  # prod's


# --- shards (settings.PREVIEW_SHARDS) ---------------------------------------------------------
class _Killed(BaseException):
    """A worker killed mid-shard: nothing after it runs (not even an except Exception)."""


def _page(client, ops, preview) -> str:
    client.force_login(ops)
    return client.get(reverse("preview-detail", args=[AGENT, preview.pk])).content.decode()


def _in_threads(*calls):
    """Run each call in its own thread (its own database connection); their results."""
    from django.db import connection

    results: dict = {}

    def target(n, call):
        try:
            results[n] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            results[n] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(n, c)) for n, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return [results.get(n) for n in range(len(calls))]


@pytest.mark.django_db
def test_preview_shards__two_shards_merged__same_report_as_one_task_exact_p95(
    ops, settings, monkeypatch
):
    monkeypatch.setattr(selectors, "BATCH_TRACES", 20)  # several batches per shard
    draft = _draft(max_input_tokens=4000)
    settings.PREVIEW_SHARDS = 1
    single, _ = services.preview_request(actor=ops, version=draft, environment=_env("sg-test"))
    expected = _run(single).report
    single.delete()  # else the second request reuses it
    settings.PREVIEW_SHARDS = 2

    sharded, reused = services.preview_request(
        actor=ops, version=draft, environment=_env("sg-test")
    )
    result = _run(sharded).report

    assert not reused and sharded.shard_count == 2 and sharded.state == Preview.State.COMPLETE
    # The two were asked for at different times: all else is the same.
    assert result["window"].pop("stored_by") > expected["window"].pop("stored_by")
    assert result == expected  # every count, id list (trace order), mean and p95
    assert result["tokens"]["new"]["p95"] is not None and result["previewed"] > 40
    assert sharded.traces_done == sharded.traces_total == result["traces_read"]
    shards = list(sharded.shards.all())
    assert [s.state for s in shards] == ["done", "done"] and sum(s.done for s in shards) == (
        result["traces_read"]
    )
    assert all(s.done > 0 and s.partial is None for s in shards)  # merged, parts cleared


@pytest.mark.django_db(transaction=True)
def test_preview_shards__both_finish_at_the_same_moment__report_merged_exactly_once(
    ops, settings, monkeypatch
):
    settings.PREVIEW_SHARDS = 2
    monkeypatch.setattr(services, "preview_queue", lambda *args: None)  # no broker here
    draft = _draft(max_input_tokens=4000)
    preview, _ = services.preview_request(actor=ops, version=draft, environment=_env("sg-test"))
    together = threading.Barrier(2)
    finish, merge = services._shard_finish, report.Replay.merge
    merges = []

    def finishing(*args):
        together.wait(timeout=60)  # both shards ask for the preview's lock at once
        return finish(*args)

    def merging(run, state):
        merges.append(state["read"])
        return merge(run, state)

    monkeypatch.setattr(services, "_shard_finish", finishing)
    monkeypatch.setattr(report.Replay, "merge", merging)

    outcomes = _in_threads(
        lambda: services.preview_shard_execute(preview.pk, 0),
        lambda: services.preview_shard_execute(preview.pk, 1),
    )

    assert sorted(outcomes) == ["complete", "shard_done"]
    assert len(merges) == 1  # one part merged into the last shard's run, once
    preview.refresh_from_db()
    assert preview.state == Preview.State.COMPLETE
    assert selectors.progress_percent(preview) == 100
    brute = _brute_force("sg-test", draft.body)
    assert preview.report["previewed"] == len(brute)
    assert preview.traces_done == preview.report["traces_read"]
    expected = {rid for rid, (old, new) in brute.items() if new == "budget_exceeded" != old}
    assert _becoming(preview.report, "budget_exceeded")[0] == len(expected) > 0


@pytest.mark.django_db
def test_preview_shards__one_shard_killed__failed_with_what_both_covered_never_complete(
    ops, client, settings, monkeypatch
):
    settings.PREVIEW_SHARDS = 2
    monkeypatch.setattr(selectors, "BATCH_TRACES", 20)
    preview, _ = services.preview_request(
        actor=ops, version=_draft(max_input_tokens=4000), environment=_env("sg-test")
    )
    progress = services._shard_progress

    def killed_after_one_batch(preview_id, index, **kwargs):
        progress(preview_id, index, **kwargs)
        raise _Killed

    monkeypatch.setattr(services, "_shard_progress", killed_after_one_batch)
    with pytest.raises(_Killed):
        services.preview_shard_execute(preview.pk, 0)
    monkeypatch.setattr(services, "_shard_progress", progress)
    assert services.preview_shard_execute(preview.pk, 1) == "shard_done"  # the other goes on
    preview.refresh_from_db()
    assert preview.state == Preview.State.RUNNING and preview.report is None
    covered = 20 + preview.shards.get(index=1).done
    assert preview.traces_done == covered < preview.traces_total

    # A minute later shard 0 has written nothing (the other shard's writes do not hide it).
    for rows in (Preview.objects.filter(pk=preview.pk), preview.shards.all()):
        rows.update(heartbeat_at=F("heartbeat_at") - timedelta(minutes=2))
    page = _page(client, ops, preview)
    assert 'data-state="failed"' in page and "stopped responding" in page
    assert f"It covered {covered} of {preview.traces_total} traces, up to" in page
    assert 'id="status-matrix"' not in page

    # Its message comes back (late acks): the preview fails for good, nothing is replayed
    # twice; a finished shard's message changes nothing.
    assert services.preview_shard_execute(preview.pk, 0) == "skipped"
    assert services.preview_shard_execute(preview.pk, 1) == "skipped"
    preview.refresh_from_db()
    assert preview.state == Preview.State.FAILED and preview.report is None
    assert "killed or lost" in preview.failure and preview.traces_done == covered


@pytest.mark.django_db(transaction=True)
def test_preview_shards__cancelled_while_both_run__both_stop_at_their_next_batch(
    ops, client, settings, monkeypatch
):
    settings.PREVIEW_SHARDS = 2
    monkeypatch.setattr(selectors, "BATCH_TRACES", 20)
    monkeypatch.setattr(services, "preview_queue", lambda *args: None)  # no broker here
    preview, _ = services.preview_request(
        actor=ops, version=_draft(max_input_tokens=4000), environment=_env("sg-test")
    )
    first_batch, cancelled = threading.Barrier(3), threading.Barrier(3)
    progress = services._shard_progress

    def progressing(preview_id, index, **kwargs):
        go_on = progress(preview_id, index, **kwargs)
        if kwargs["done"] == 20:  # both shards are running: ops cancels now
            first_batch.wait(timeout=60)
            cancelled.wait(timeout=60)
        return go_on

    monkeypatch.setattr(services, "_shard_progress", progressing)

    def cancel():
        first_batch.wait(timeout=60)
        services.preview_cancel(actor=ops, preview=preview)
        cancelled.wait(timeout=60)

    outcomes = _in_threads(
        lambda: services.preview_shard_execute(preview.pk, 0),
        lambda: services.preview_shard_execute(preview.pk, 1),
        cancel,
    )

    assert outcomes[:2] == ["stopped", "stopped"]
    preview.refresh_from_db()
    assert preview.state == Preview.State.CANCELLED and preview.report is None
    assert [(s.state, s.done) for s in preview.shards.all()] == [("stopped", 40)] * 2
    assert preview.traces_done == 80 < preview.traces_total
    page = _page(client, ops, preview)
    assert 'data-state="cancelled"' in page
    assert f"It covered 80 of {preview.traces_total} traces, up to" in page


@pytest.mark.django_db
def test_window_batches__binary_read__equals_the_orm_read_old_runtime_and_odd_rows_included(
    ops, monkeypatch
):
    """The window's read (psycopg's binary rows) hands the replay exactly what the ORM reads
    of the same stored traces: every trace column, and candidates that rebuild into the same
    items and recorded facts — traces of an old runtime (no replay fields: NULLs and empty
    strings), links, a full-precision relevance, an unsized item, a provider bundle."""
    monkeypatch.setattr(selectors, "BATCH_TRACES", 7)  # several batches, a keyset boundary
    traces = Trace.objects.filter(environment__key="sg-test", strategy=STRATEGY)
    first = list(traces.order_by("id")[:4])
    traces.filter(pk__in=[t.pk for t in first[:2]]).update(
        engine="", fixed_input_tokens=None, relevance_threshold=None
    )
    _restore_candidates(
        first[0],
        lambda c: msgspec.structs.replace(c, outcome=None, reason_code=None, provider_bundle=None),
    )
    _restore_candidates(
        first[2],
        lambda c: msgspec.structs.replace(
            c,
            depends_on=("order:1", "P7"),
            conflicts_with=("chat",),
            relevance=0.12345678901234568,
            size=None,
            provider_bundle="policy-P7",
            note="the provider's words",
            version="",
        ),
        positions={0},
    )
    window = {
        "agent_id": first[0].agent_id,
        "environment_id": first[0].environment_id,
        "strategy": STRATEGY,
        "start": min(t.occurred_at for t in traces),
        "end": max(t.occurred_at for t in traces) + timedelta(seconds=1),
        "stored_by": timezone.now(),
    }

    read = [entry for batch in selectors.window_batches(**window) for entry in batch]

    expected = list(
        traces.order_by("occurred_at", "id").values_list(*report.TRACE_COLUMNS, "occurred_at")
    )
    assert len(read) == len(expected) == traces.count() > 7
    for (trace, rows, at), row in zip(read, expected, strict=True):
        assert (tuple(trace), at) == (row[:-1], row[-1])
        stored = candidates_of(Trace.objects.get(pk=trace[report.T_ID], occurred_at=at))
        orm = [_report_row(trace[report.T_ID], c) for c in stored]
        assert report.rebuild(rows) == tuple(report.candidate_item(r) for r in orm)
        assert report.rebuild_facts(rows) == report.rebuild_facts(orm)
    by_id = {trace[report.T_ID]: (trace, rows) for trace, rows, _ in read}
    assert by_id[first[0].pk][0][report.T_ENGINE] == ""
    assert by_id[first[0].pk][0][report.T_FIXED] is None
    item = report.rebuild(by_id[first[2].pk][1])[0]
    assert (item.depends_on, item.conflicts_with, item.size, item.bundle, item.version) == (
        ("order:1", "P7"),
        ("chat",),
        None,
        "policy-P7",
        "",
    )
    assert item.relevance == 0.12345678901234568
    assert report.rebuild(by_id[first[0].pk][1])[0].outcome == "fetched"

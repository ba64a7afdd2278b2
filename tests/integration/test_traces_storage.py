"""How traces are stored for the candidate search: each trace's kinds of candidate once, in
its row, read newest first without sorting the window (docs/traces-storage.md, docs/capacity.md)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.factories import (
    candidate,
    post_batch,
    runtime_token,
    trace_payload,
    world,
)
from tests.factories.traces import candidates_of
from traces import selectors, stored
from traces.filters import TraceFilters
from traces.models import CandidateKind, Trace

pytestmark = pytest.mark.django_db

OLD_TURN = {"source": "recent_dialogue", "decision": "irrelevant", "reason": "older turn"}


@pytest.fixture
def env(client):
    env = world()
    secret = runtime_token(env["environments"]["sg-test"])
    # Three old dialogue turns excluded for the same reason, one for another, one selected.
    turns = [candidate(f"turn-{n}", required=False, **OLD_TURN) for n in range(3)]
    turns.append(candidate("turn-3", required=False, **{**OLD_TURN, "reason": "duplicate"}))
    turns.append(candidate("turn-4", source="recent_dialogue", required=False))
    post_batch(client, secret, [trace_payload("req-turns", candidates=turns)])
    return env


def test_ingest__several_candidates_of_one_kind__the_kind_held_once(env):
    """Three old turns excluded for one reason are one kind, a fourth for another reason a
    second; the selected turn a third. Each kind is numbered once in the kind table, and the
    trace keeps all five candidates in order."""
    trace = Trace.objects.get(request_id="req-turns")
    kinds = {
        (k.source, k.decision, k.reason): k.pk
        for k in CandidateKind.objects.filter(pk__in=trace.kinds)
    }
    assert kinds.keys() == {
        ("recent_dialogue", "irrelevant", "older turn"),
        ("recent_dialogue", "irrelevant", "duplicate"),
        ("recent_dialogue", "selected", "required"),
    }
    assert sorted(trace.kinds) == sorted(kinds.values())  # one number per kind, no repeats
    assert CandidateKind.objects.count() == 3
    assert [c.item_id for c in candidates_of(trace)] == [f"turn-{n}" for n in range(5)]


def test_ingest__a_kind_seen_before__keeps_its_number(client, env):
    """A later trace excluding the same kind gets the same number, not a new row."""
    post_batch(
        client,
        runtime_token(env["environments"]["sg-test"]),
        [
            trace_payload(
                "req-again",
                candidates=[candidate("turn-9", required=False, **OLD_TURN)],
            )
        ],
    )
    first, again = (Trace.objects.get(request_id=r) for r in ("req-turns", "req-again"))
    old_turn = CandidateKind.objects.get(**OLD_TURN).pk
    assert old_turn in first.kinds and again.kinds == [old_turn]
    assert CandidateKind.objects.filter(**OLD_TURN).count() == 1


@pytest.mark.parametrize(
    "query",
    [
        OLD_TURN,
        {"source": "recent_dialogue", "decision": "irrelevant"},
        {"source": "recent_dialogue"},
        {"decision": "irrelevant", "reason": "duplicate"},
        {"decision": "selected"},
    ],
)
def test_trace_list__any_candidate_filter__finds_the_trace_once(client, env, make_user, query):
    support = make_user("sup", support="assistant_professional")
    client.force_login(support)
    response = client.get("/traces/", query)
    assert [t.request_id for t in response.context["traces"]] == ["req-turns"]
    assert response.context["page_obj"].paginator.count == 1


def _kind_number(**kind) -> int:
    with connection.cursor() as cursor:
        return stored.kind_numbers(cursor, [(kind["source"], kind["decision"], kind["reason"])])[
            (kind["source"], kind["decision"], kind["reason"])
        ]


def _list_plan(user, query: dict) -> tuple[str, list]:
    """(EXPLAIN of the read of a first page of the trace list, request ids on that page)."""
    filters = TraceFilters.from_query(
        {**query, "since": (timezone.now() - timedelta(days=1)).isoformat()}
    )
    listing = selectors.trace_listing(user=user, filters=filters)
    page_keys = listing.object_list.values_list("pk", "occurred_at")[:50]
    sql, params = page_keys.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return plan, [t.request_id for t in listing.page(1)]


def _indexes_of_partitions(name: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [name],
        )
        return {relname for (relname,) in cursor.fetchall()}


COMMON = {"source": "recent_dialogue", "decision": "irrelevant", "reason": "older product"}


def test_trace_list__exclusion_filter__page_read_without_sorting_the_window(env, make_user):
    """The page of "source S excluded as D for reason R in the last day" must not grow with
    the day's matches. A kind most traces have: walked newest first off the time index,
    each trace's kinds checked, stopping at the page (a sort would read every match of the
    day first). A rare kind: its few traces found off the kinds' GIN index, sorted apart."""
    from tests.factories.traces import traces_generated

    support = make_user("sup", support="assistant_professional")
    common = _kind_number(**COMMON)
    with connection.cursor() as cursor:
        traces_generated(
            cursor,
            agent=env["agents"]["assistant_professional"],
            environment=env["environments"]["sg-test"],
            start=timezone.now() - timedelta(hours=20),
            every=timedelta(seconds=10),
            count=6_000,
        )
        cursor.execute(
            "UPDATE traces_trace SET kinds = ARRAY[%s] WHERE request_id LIKE 'gen-%%'", [common]
        )
        cursor.execute("ANALYZE traces_trace")

    plan, page = _list_plan(support, COMMON)
    used = set(re.findall(r"Index (?:Only )?Scan(?: Backward)? using (\S+)", plan))
    assert used and used <= _indexes_of_partitions("trace_time_id"), plan
    assert "Sort" not in plan, plan
    assert len(page) == 50 and page[0] == "gen-5999"

    # A rare kind: its matching keys read at once off the kinds' GIN index (the capped count)
    # and the page cut from them — the time index is never walked for it (its 50 matches
    # could be 50,000 traces apart).
    filters = TraceFilters.from_query(
        {**OLD_TURN, "since": (timezone.now() - timedelta(days=1)).isoformat()}
    )
    listing = selectors.trace_listing(user=support, filters=filters)
    with CaptureQueriesContext(connection) as run:
        page = [t.request_id for t in listing.page(1)]
    assert page == ["req-turns"]
    reads = [q["sql"] for q in run.captured_queries if '"kinds" &&' in q["sql"]]
    assert len(reads) == 1 and "ORDER BY" not in reads[0], reads
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + reads[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert re.search(r"Bitmap Index Scan on \S*kinds", plan), plan


def _partitions_read(statement: str, params: dict) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + statement, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return set(re.findall(r" on (traces_(?:trace|candidate)_p\d{8})", plan))


@pytest.mark.parametrize("statement", ["ROLLUP_INSERT", "_ROLLUP_CANDIDATES"])
def test_rollup__one_hour__reads_that_day_of_traces_only(env, statement):
    """The hourly rollup runs every hour over millions of traces and their candidates: both
    its reads (the traces counted, their candidates counted) must read the hour's day
    partition, not every day of the retention."""
    from traces import services

    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    read = _partitions_read(getattr(services, statement), {"hour": hour})
    assert read == {f"traces_trace_p{hour:%Y%m%d}"}, read


def test_lookup_by_request_id__reads_the_day_of_the_trace_only(env, django_assert_num_queries):
    """The trace page, search, refusals and the ingest's duplicate report find a trace by
    request_id through its request key: one day's partition, not every day of the retention."""
    trace = Trace.objects.get(request_id="req-turns")
    sql, params = selectors.traces_keyed(Trace.objects.all(), ["req-turns"]).query.sql_with_params()
    assert _partitions_read(sql, params) == {f"traces_trace_p{trace.occurred_at:%Y%m%d}"}
    # A miss is one probe of the request keys, and no trace partition at all.
    with django_assert_num_queries(1):
        assert list(selectors.traces_keyed(Trace.objects.all(), ["req-missing"])) == []


# --- migration 0007: the replay fields on every partition, without a rewrite --------------------
REPLAY_COLUMNS = {
    "traces_trace": {
        "engine",
        "fixed_input_tokens",
        "relevance_threshold",
        "selection_context_window",
        "selection_max_input_tokens",
    },
}


def _partition_columns(cursor, parent: str) -> dict[str, set[str]]:
    cursor.execute(
        "SELECT c.relname, a.attname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE i.inhparent = %s::regclass",
        [parent],
    )
    columns: dict[str, set[str]] = {}
    for name, column in cursor.fetchall():
        columns.setdefault(name, set()).add(column)
    return columns


def _files(cursor, names) -> dict[str, int]:
    cursor.execute(
        "SELECT relname, relfilenode FROM pg_class WHERE relname = ANY(%s)", [list(names)]
    )
    return dict(cursor.fetchall())


@pytest.mark.django_db(transaction=True)
def test_migration_0007__table_with_rows__every_partition_gains_the_columns_without_rewrite(
    client,
):
    """Back to 0006 and forward again over stored traces: every day partition (and one
    created later) has the replay columns, no partition was rewritten (its file is the same),
    and the traces stored before read as "no replay fields" — their candidates too, once
    migration 0013 has moved them into the trace row."""
    from django.db.migrations.executor import MigrationExecutor

    from traces import partitions

    env = world()
    post_batch(client, runtime_token(env["environments"]["sg-test"]), [trace_payload("req-old")])
    trace = Trace.objects.get(request_id="req-old")
    day_partitions = [
        partitions.partition_name(parent, trace.occurred_at.date()) for parent in partitions.PARENTS
    ]
    executor = MigrationExecutor(connection)
    executor.migrate([("traces", "0006_candidate_key_and_exclusion_time")])
    try:
        with connection.cursor() as cursor:
            before = _files(cursor, day_partitions)
            assert (
                not REPLAY_COLUMNS["traces_trace"]
                & _partition_columns(cursor, "traces_trace")[day_partitions[0]]
            )
            # Candidates as 0006 stored them (going back dropped the row's packed candidates).
            cursor.execute(
                "INSERT INTO traces_candidate (trace_id, position, item_id, source, version, "
                "size, required, bundle, decision, reason, outcome, depends_on, conflicts_with, "
                "note, occurred_at, first_of_kind) VALUES "
                "(%(trace)s, 0, 'P7-v2', 'applicable_policy', 'v2', 2100, true, 'policy-P7', "
                "'selected', 'required', '', '[]', '[]', '', %(at)s, true), "
                "(%(trace)s, 1, 'old-chat', 'recent_dialogue', 'e-311', 900, false, '', "
                "'irrelevant', 'older turn', '', '[]', '[]', '', %(at)s, true)",
                {"trace": trace.pk, "at": trace.occurred_at},
            )
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("traces"))
    with connection.cursor() as cursor:
        assert _files(cursor, day_partitions) == before  # no rewrite
        later = timezone.now().date() + timedelta(days=30)
        partitions.ensure_days(cursor, [later])
        for parent, wanted in REPLAY_COLUMNS.items():
            columns = _partition_columns(cursor, parent)
            assert partitions.partition_name(parent, later) in columns
            assert all(wanted <= have for have in columns.values()), parent
        cursor.execute(
            "DROP TABLE "
            + ", ".join(partitions.partition_name(p, later) for p in partitions.PARENTS)
        )
    trace = Trace.objects.get(request_id="req-old")
    assert (trace.engine, trace.fixed_input_tokens) == ("", None)
    stored = candidates_of(trace)
    assert [(c.item_id, c.bundle, c.decision) for c in stored] == [
        ("P7-v2", "policy-P7", "selected"),
        ("old-chat", "", "irrelevant"),
    ]
    assert {(c.provider_bundle, c.reason_code) for c in stored} == {("", "")}
    # Migration 0013 numbered the old kinds as the ingest would, for the list to find.
    assert [CandidateKind.objects.get(pk=n) for n in trace.kinds] == [
        CandidateKind.objects.get(
            source="applicable_policy", decision="selected", reason="required"
        ),
        CandidateKind.objects.get(**OLD_TURN),
    ]

"""How traces are stored for the exclusion list: one index entry per trace and kind of
exclusion, read newest first without sorting the window (docs/traces-storage.md)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.factories import candidate, post_batch, runtime_token, trace_payload, world
from traces import selectors
from traces.filters import TraceFilters
from traces.models import Candidate, Trace

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


def test_ingest__several_candidates_of_one_kind__only_the_first_marked(env):
    marks = list(
        Candidate.objects.filter(trace__request_id="req-turns")
        .order_by("position")
        .values_list("item_id", "first_of_kind")
    )
    assert marks == [
        ("turn-0", True),
        ("turn-1", False),
        ("turn-2", False),
        ("turn-3", True),
        ("turn-4", True),
    ]


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


def test_trace_list__exclusion_filter__read_off_the_index_newest_first_without_a_sort(
    env, make_user
):
    """The page of "source S excluded as D for reason R in the last day" must not grow with
    the day's matches: the keys come in order from the exclusion index and stop at the
    page (a sort would read every match of the window first)."""
    support = make_user("sup", support="assistant_professional")
    filters = TraceFilters.from_query(
        {**OLD_TURN, "since": (timezone.now() - timedelta(days=1)).isoformat()}
    )
    paginator = selectors.CandidateMatchPaginator(
        selectors._traces_filtered(user=support, filters=filters),
        selectors._candidates_matching(filters),
        50,
        cap=selectors.CANDIDATE_COUNT_CAP,
    )
    sql, params = paginator.match_keys()[:1001].query.sql_with_params()
    with connection.cursor() as cursor:
        # A handful of rows would be read by a scan; the question is whether the index can
        # give the order, which is what a table of millions of rows needs.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        # The partitions' copies of the exclusion index.
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'candidate_exclusion_time'::regclass"
        )
        exclusion_indexes = {name for (name,) in cursor.fetchall()}
    used = set(re.findall(r"Index (?:Only )?Scan(?: Backward)? using (\S+)", plan))
    assert used and used <= exclusion_indexes, plan
    assert "Sort" not in plan, plan
    assert [key[0] for key in paginator.match_keys()] == [
        Trace.objects.get(request_id="req-turns").pk
    ]


def _partitions_read(statement: str, params: dict) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + statement, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return set(re.findall(r" on (traces_(?:trace|candidate)_p\d{8})", plan))


def test_rollup__one_hour__reads_that_day_of_candidates_only(env):
    """The hourly rollup runs every hour over tens of millions of candidates: it must read
    the hour's day partition, not every day of the retention."""
    from traces.services import ROLLUP_INSERT

    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    read = _partitions_read(ROLLUP_INSERT, {"hour": hour})
    day = f"{hour:%Y%m%d}"
    assert read == {f"traces_trace_p{day}", f"traces_candidate_p{day}"}, read


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
    "traces_candidate": {"provider_bundle", "reason_code"},
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
    and the traces stored before read as "no replay fields"."""
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
    assert set(Candidate.objects.values_list("provider_bundle", "reason_code")) == {("", "")}

"""Migration 0013 (issue 36): the candidate rows of every stored trace become its compact value
and its kinds of exclusion, and the candidate table goes.

Back to 0012, traces and candidates written as that schema kept them (raw SQL, the candidate
table partitioned by day as 0005 made it), forward to 0013: each trace's decoded candidates
are its old rows mapped to the wire ("" where the runtime sent none becomes None), in position
order; its kinds number its distinct exclusions; the table and its partitions are gone.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from context_runtime import wire
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tests.factories import world
from traces import compact, partitions
from traces.models import CandidateKind, Trace
from traces.stored import trace_candidates

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("traces", "0012_data_protection")
MIGRATION = importlib.import_module("traces.migrations.0013_compact_candidates")

_TRACE = """
INSERT INTO traces_trace (request_id, agent_id, environment_id, occurred_at, received_at,
    strategy, strategy_version, profile_version, documents, config_fallback, config_resolution,
    task_id, task_revision, principal, model_name, model_adapter, model_context_window, status,
    degradation, budget_max_input_tokens, input_estimate, input_estimate_unit,
    input_estimate_estimator, sources)
VALUES (%s, %s, %s, %s, now(), 'after_sales_consultation', 3, 7, '{}', false, 'fresh', 'T9', 4,
    'user-1', 'model-x', 'adapter-x', 128000, 'ready', '', 8000, 6200, 'token', 'adapter-x', '[]')
RETURNING id
"""
_REQUEST_KEY = """
INSERT INTO traces_request_key (environment_id, request_id, trace_id, occurred_at)
VALUES (%s, %s, %s, %s)
"""
_CANDIDATE = """
INSERT INTO traces_candidate (trace_id, position, item_id, source, version, size, required,
    bundle, decision, reason, outcome, relevance, depends_on, conflicts_with, note, occurred_at,
    first_of_kind, provider_bundle, reason_code)
VALUES (%(trace_id)s, %(position)s, %(item_id)s, %(source)s, %(version)s, %(size)s,
    %(required)s, %(bundle)s, %(decision)s, %(reason)s, %(outcome)s, %(relevance)s,
    %(depends_on)s, %(conflicts_with)s, %(note)s, %(occurred_at)s, %(first_of_kind)s,
    %(provider_bundle)s, %(reason_code)s)
"""


def old_row(position: int, item_id: str, **values) -> dict:
    """A candidate row as the old table kept it: "" where the runtime sent none."""
    row = {
        "position": position,
        "item_id": item_id,
        "source": "task_state",
        "version": "4",
        "size": 310,
        "required": True,
        "bundle": "",
        "decision": "selected",
        "reason": "required",
        "outcome": "",
        "relevance": None,
        "depends_on": [],
        "conflicts_with": [],
        "note": "",
        "first_of_kind": True,
        "provider_bundle": "",
        "reason_code": "",
    }
    row.update(values)
    return row


def as_wire(row: dict) -> wire.Candidate:
    """What the trace must read back for an old row (the mapping replays always used)."""
    return wire.Candidate(
        id=row["item_id"],
        source=row["source"],
        decision=row["decision"],
        version=row["version"],
        size=row["size"],
        required=row["required"],
        bundle=row["bundle"] or None,
        reason=row["reason"],
        outcome=row["outcome"] or None,
        relevance=row["relevance"],
        depends_on=tuple(row["depends_on"]),
        conflicts_with=tuple(row["conflicts_with"]),
        note=row["note"],
        provider_bundle=row["provider_bundle"] or None,
        reason_code=row["reason_code"] or None,
    )


def _partition_candidates_by_day(cursor, days) -> None:
    """The candidate table as 0005 made it (partitioned by occurred_at, a table per day):
    unapplying 0013 recreates it from the model's state, as one plain table."""
    cursor.execute(
        """
        ALTER TABLE traces_candidate RENAME TO traces_candidate_plain;
        CREATE TABLE traces_candidate (LIKE traces_candidate_plain INCLUDING DEFAULTS)
            PARTITION BY RANGE (occurred_at);
        ALTER TABLE traces_candidate ADD PRIMARY KEY (trace_id, position, occurred_at);
        DROP TABLE traces_candidate_plain;
        """
    )
    for day in days:
        low = datetime(day.year, day.month, day.day, tzinfo=UTC)
        cursor.execute(
            f"CREATE TABLE {partitions.partition_name('traces_candidate', day)} "
            "PARTITION OF traces_candidate FOR VALUES FROM (%s) TO (%s)",
            [low, low + timedelta(days=1)],
        )


def _tables_named(cursor, pattern: str) -> list[str]:
    cursor.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
        "AND relname LIKE %s ORDER BY relname",
        [pattern],
    )
    return [name for (name,) in cursor.fetchall()]


def _old_world(start: datetime) -> dict[str, list[dict]]:
    """request_id → its old candidate rows (in position order). Two days, two traces at the
    same moment, a trace without candidates, kinds shared across traces."""
    too_long = "too long for the budget"
    turns = [
        old_row(n, f"turn-{n}", source="recent_dialogue", decision="irrelevant",
                reason="older turn", required=False, relevance=0.05 * n,
                first_of_kind=n == 0)
        for n in range(3)
    ]  # fmt: skip
    return {
        "old-rich": [
            old_row(0, "task_state:T9", outcome="fetched", reason_code="required"),
            old_row(
                1,
                "P7-v2",
                source="applicable_policy",
                version="v2",
                size=2100,
                bundle="policy-P7",
                provider_bundle="policy-P7",
                relevance=1 / 3,
                depends_on=["task_state:T9"],
                conflicts_with=["P6-v1"],
                note="the provider's words · 旧",
            ),
            old_row(
                2,
                "old-chat",
                source="recent_dialogue",
                version="",
                size=None,
                required=False,
                decision="over_budget",
                reason=too_long,
                outcome="fetched",
                relevance=0.123456789,
                reason_code="over_budget_optional",
            ),
            old_row(
                3,
                "P6-v1",
                source="applicable_policy",
                decision="conflict",
                reason="conflicts with P7-v2",
                required=False,
                outcome="not_fetched",
                reason_code="flagged_conflict",
            ),
            old_row(
                4,
                "order:A1042",
                source="order_delivery",
                decision="not_fetched",
                reason="",
                required=False,
                outcome="not_fetched",
                reason_code="provider_not_fetched",
            ),
        ],  # fmt: skip
        "old-turns": [
            old_row(0, "task_state:T9"),
            *[{**t, "position": t["position"] + 1} for t in turns],
        ],
        "old-same-moment": [
            old_row(
                0,
                "old-chat",
                source="recent_dialogue",
                decision="over_budget",
                reason=too_long,
                required=False,
            ),
            old_row(
                1,
                "turn-9",
                source="recent_dialogue",
                decision="irrelevant",
                reason="older turn",
                required=False,
            ),
        ],  # fmt: skip
        "old-empty": [],
        "old-selected-only": [old_row(0, "task_state:T9"), old_row(1, "memory:1", source="memory")],
    }


def test_migration_0013__old_candidate_rows__become_each_traces_compact_value_and_kinds(
    monkeypatch,
):
    env = world()
    agent, environment = env["agents"]["assistant_professional"], env["environments"]["sg-test"]
    start = (timezone.now() - timedelta(days=1)).replace(hour=23, minute=59, second=0)
    times = {
        "old-rich": start,
        "old-turns": start + timedelta(minutes=2),  # the next day
        "old-same-moment": start + timedelta(minutes=2),
        "old-empty": start + timedelta(minutes=3),
        "old-selected-only": start - timedelta(minutes=1),
    }
    rows_of = _old_world(start)
    days = {when.astimezone(UTC).date() for when in times.values()}
    assert len(days) == 2

    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    try:
        with connection.cursor() as cursor:
            _partition_candidates_by_day(cursor, days)
            partitions.ensure_days(cursor, days)
            # Inserted out of position order: the conversion reads them in position order.
            for request_id, rows in rows_of.items():
                when = times[request_id]
                cursor.execute(_TRACE, [request_id, agent.pk, environment.pk, when])
                trace_id = cursor.fetchone()[0]
                cursor.execute(_REQUEST_KEY, [environment.pk, request_id, trace_id, when])
                for row in reversed(rows):
                    cursor.execute(
                        _CANDIDATE,
                        {
                            **row,
                            "trace_id": trace_id,
                            "occurred_at": when,
                            "depends_on": orjson.dumps(row["depends_on"]).decode(),
                            "conflicts_with": orjson.dumps(row["conflicts_with"]).decode(),
                        },
                    )
        # Chunks of two traces: the conversion's keyset paging crosses the two traces at one
        # moment and the two days.
        monkeypatch.setattr(MIGRATION, "CHUNK", 2)
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate([("traces", "0013_compact_candidates")])

        with connection.cursor() as cursor:
            assert _tables_named(cursor, "traces\\_candidate") == []
            assert _tables_named(cursor, "traces\\_candidate\\_p%") == []
        kinds = {k.pk: (k.source, k.decision, k.reason) for k in CandidateKind.objects.all()}
        for request_id, rows in rows_of.items():
            trace = Trace.objects.get(request_id=request_id)
            expected = [as_wire(row) for row in rows]
            assert [c.wire for c in trace_candidates(trace)] == expected, request_id
            assert [kinds[n] for n in trace.kinds] == compact.kinds(expected), request_id
        assert sorted(kinds.values()) == sorted(
            {k for rows in rows_of.values() for k in compact.kinds(map(as_wire, rows))}
        )
        rich = trace_candidates(Trace.objects.get(request_id="old-rich"))
        assert (rich[0].wire.bundle, rich[0].wire.outcome, rich[0].wire.reason_code) == (
            None,
            "fetched",
            "required",
        )
        assert rich[1].wire.relevance == 1 / 3 and rich[1].depends_on == ["task_state:T9"]
        assert Trace.objects.get(request_id="old-empty").kinds == []
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

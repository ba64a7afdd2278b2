"""Parsing a trace batch and reading a trace: pure functions, no database."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest
from context_runtime import wire
from context_runtime.findings import Finding

from tests.factories import candidate, trace_payload
from traces import ingest
from traces.diagnosis import where_to_look


def parse(*traces):
    return ingest.parse_batch(orjson.dumps({"traces": list(traces)}))


def test_parse_batch__valid_trace__decoded_with_its_candidates():
    batch = parse(trace_payload("req-92"))
    assert batch.rejected == []
    ((index, trace),) = batch.valid
    assert (index, trace.request_id, len(trace.candidates)) == (0, "req-92", 3)
    assert trace.documents["after_sales_consultation"] == 3


def test_parse_batch__wrong_decision__error_path_relative_to_trace():
    bad = trace_payload("req-58")
    bad["candidates"][2]["decision"] = "maybe"
    batch = parse(trace_payload("req-1"), bad)
    assert [i for i, _ in batch.valid] == [0]
    (rejection,) = batch.rejected
    assert rejection.as_dict()["index"] == 1
    assert rejection.request_id == "req-58"
    (err,) = rejection.as_dict()["errors"]
    assert err["path"] == "candidates[2].decision"
    assert err["code"] == "invalid_choice"
    assert "not_fetched" in err["message"]


@pytest.mark.parametrize(
    ("change", "path", "code"),
    [
        ({"status": "fine"}, "status", "invalid_choice"),
        ({"request_id": ""}, "request_id", "blank"),
        ({"occurred_at": "yesterday"}, "occurred_at", "invalid"),
        ({"occurred_at": "2026-11-30T09:12:44"}, "occurred_at", "invalid"),
        ({"status": "degraded", "degradation": None}, "degradation", "required"),
        ({"candidates": [candidate(reason="x" * 201)]}, "candidates[0].reason", "too_long"),
        ({"candidates": [candidate()] * 501}, "candidates", "too_long"),
        ({"documents": {"profile": 7}}, "documents", "required"),
    ],
)
def test_parse_batch__invalid_field__rejected_with_path_and_code(change, path, code):
    batch = parse(trace_payload(**change))
    assert batch.valid == []
    assert batch.rejected[0].errors[0].path == path
    assert batch.rejected[0].errors[0].code == code


def test_parse_batch__missing_field__named_in_path():
    payload = trace_payload()
    del payload["agent"]
    assert parse(payload).rejected[0].errors == [
        Finding("agent", "required", "this field is required")
    ]


@pytest.mark.parametrize(
    ("body", "code"),
    [(b"{", "malformed_json"), (b"", "malformed_json"), (b"[]", "validation_failed")],
)
def test_parse_batch__unusable_body__whole_request_refused(body, code):
    with pytest.raises(ingest.BatchRefused) as refused:
        ingest.parse_batch(body)
    assert refused.value.code == code


def test_parse_batch__over_1000_traces__refused_with_advice_to_split():
    with pytest.raises(ingest.BatchRefused) as refused:
        parse(*[trace_payload(f"r{i}") for i in range(1001)])
    assert refused.value.code == "too_many_traces"
    assert "Split" in refused.value.message


def test_snapshot_bytes__object_sent__kept_verbatim():
    ((_, trace),) = parse(trace_payload(snapshot={"messages": ["hi"]})).valid
    assert ingest.snapshot_bytes(trace) == b'{"messages":["hi"]}'


def test_parse_batch__snapshots__handed_over_by_index_for_the_valid_traces_that_carry_one():
    """The store reads each trace's snapshot from the parsed batch, not from the trace again."""
    bad = trace_payload("req-bad", snapshot={"messages": ["lost"]})
    bad["status"] = "maybe"
    batch = parse(
        trace_payload("req-none"),
        trace_payload("req-null", snapshot=None),
        bad,
        trace_payload("req-snap", snapshot={"messages": ["hi"]}),
    )
    assert [i for i, _ in batch.valid] == [0, 1, 3]
    assert batch.snapshots == {3: b'{"messages":["hi"]}'}


def _trace(status, **kw):
    base = dict(
        status=status,
        degradation="",
        strategy="after_sales_consultation",
        strategy_version=3,
        config_fallback=False,
        model_name="model-x",
        model_adapter="adapter-x",
    )
    base.update(kw)
    return SimpleNamespace(**base)


def _cand(item, source, decision, required=True, reason="r"):
    return SimpleNamespace(
        item_id=item, source=source, decision=decision, required=required, reason=reason
    )


def test_where_to_look__ready_and_required_selected__model_and_prompt_first():
    hints = where_to_look(_trace("ready"), [_cand("T9", "task_state", "selected")])
    assert hints[0].component == "model and prompt"
    assert hints[0].first


def test_where_to_look__not_fetched__names_the_provider():
    hints = where_to_look(
        _trace("degraded", degradation="general_policy_only"),
        [_cand("order:A1042", "order_delivery", "not_fetched")],
    )
    assert hints[0].component == "handler general_policy_only"
    assert "order_delivery" in hints[0].text
    assert hints[1].component == "order_delivery provider"


def test_where_to_look__no_access__authorization_service():
    hints = where_to_look(
        _trace("missing_required_data"), [_cand("order:A1042", "order_delivery", "no_access")]
    )
    assert hints[0].component == "authorization service"


def test_where_to_look__required_bundle_over_budget__the_strategy():
    hints = where_to_look(
        _trace("budget_exceeded"), [_cand("P7-v2", "applicable_policy", "over_budget")]
    )
    assert hints[0].component == "strategy after_sales_consultation v3"


def test_where_to_look__conflict__owners_of_the_source():
    hints = where_to_look(
        _trace("source_conflict"),
        [
            _cand("P7-v2", "applicable_policy", "conflict"),
            _cand("P7-v3", "applicable_policy", "conflict"),
        ],
    )
    assert hints[0].component == "owners of applicable_policy"
    assert len(hints[0].items) == 2


def test_batch_json_schema__from_the_validating_structs__documents_limits_and_enums():
    schema = ingest.batch_json_schema()["properties"]["traces"]
    assert schema["maxItems"] == wire.MAX_TRACES_PER_BATCH
    candidates = schema["items"]["properties"]["candidates"]
    assert candidates["maxItems"] == wire.MAX_CANDIDATES_PER_TRACE
    assert set(candidates["items"]["properties"]["decision"]["enum"]) == set(wire.DECISIONS)
    assert schema["items"]["properties"]["degradation"]["nullable"] is True

"""Parsing a trace batch and reading a trace: pure functions, no database."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import msgspec
import orjson
import pytest
from context_runtime import wire
from context_runtime.client import Resolution
from context_runtime.engine import CandidateItem, select
from context_runtime.findings import Finding
from context_runtime.reporter import TraceReporter, encode_trace

from console.kernel import strict_json
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


# --- a key twice inside one trace (issue 19, item 7) ---------------------------------------------
def compact(payload: dict) -> bytes:
    return orjson.dumps(payload)


def batch_of(*traces: bytes) -> bytes:
    """The envelope as the SDK's reporter writes it around traces already encoded."""
    return b'{"traces":[' + b",".join(traces) + b"]}"


def twice(raw: bytes, key_value: bytes, other: bytes) -> bytes:
    """`raw` with the member `key_value` (e.g. b'"status":"ready"') preceded by the same key
    with another value: the later one is what a last-wins decoder would keep."""
    key = key_value.split(b":", 1)[0]
    assert raw.count(key_value) >= 1
    return raw.replace(key_value, key + b":" + other + b"," + key_value, 1)


def duplicate_findings(batch) -> list[tuple[int, str | None, str, str]]:
    return [(r.index, r.request_id, e.path, e.code) for r in batch.rejected for e in r.errors]


def test_parse_batch__key_twice_at_a_trace_s_top_level__that_trace_rejected_rest_valid():
    bad = twice(compact(trace_payload("req-58")), b'"status":"ready"', b'"degraded"')
    batch = ingest.parse_batch(batch_of(compact(trace_payload("req-1")), bad))
    assert [i for i, _ in batch.valid] == [0]
    assert duplicate_findings(batch) == [(1, "req-58", "status", "duplicate_key")]
    assert "status appears twice" in batch.rejected[0].errors[0].message


def test_parse_batch__key_twice_in_a_candidate__path_names_the_candidate():
    bad = twice(compact(trace_payload("req-58")), b'"decision":"irrelevant"', b'"selected"')
    batch = ingest.parse_batch(batch_of(bad))
    assert batch.valid == []
    assert duplicate_findings(batch) == [(0, "req-58", "candidates[2].decision", "duplicate_key")]


@pytest.mark.parametrize(
    ("overrides", "key_value", "other", "path"),
    [
        ({}, b'"name":"model-x"', b'"model-y"', "model.name"),
        ({}, b'"max_input_tokens":8000', b"100", "budget.max_input_tokens"),
        ({}, b'"profile":7', b"6", "documents.profile"),
        (
            {"snapshot": {"messages": [{"role": "user", "text": "hi"}]}},
            b'"role":"user"',
            b'"system"',
            "snapshot.messages[0].role",
        ),
    ],
)
def test_parse_batch__key_twice_in_a_nested_object__rejected_at_its_path(
    overrides, key_value, other, path
):
    bad = twice(compact(trace_payload("req-58", **overrides)), key_value, other)
    batch = ingest.parse_batch(batch_of(bad))
    assert duplicate_findings(batch) == [(0, "req-58", path, "duplicate_key")]


def test_parse_batch__sdk_trace_with_a_key_twice_in_its_snapshot__rejected():
    """The struct carries the snapshot as its bytes: equal to the struct's encoding proves
    nothing about them, so they are read on their own."""
    sdk = encode_trace(
        msgspec.json.decode(compact(trace_payload("req-58", snapshot={"a": 1})), type=wire.Trace),
        strategy={"snapshot": {"allowed": True}},
    )
    bad = sdk.replace(b'"snapshot":{"a":1}', b'"snapshot":{"a":1,"a":2}')
    batch = ingest.parse_batch(batch_of(bad))
    assert duplicate_findings(batch) == [(0, "req-58", "snapshot.a", "duplicate_key")]


def test_parse_batch__non_canonical_traces_without_a_key_twice__accepted():
    """Whitespace, another field order, escapes: not the console's encoding, read exactly."""
    pretty = orjson.dumps(trace_payload("req-1"), option=orjson.OPT_INDENT_2)
    spaced = json.dumps(trace_payload("req-2", principal="shop-ä")).encode()  # "\u00e4"
    body = b'{\n  "traces": [\n' + pretty + b",\n" + spaced + b"\n  ]\n}"
    batch = ingest.parse_batch(body)
    assert batch.rejected == []
    assert [t.request_id for _, t in batch.valid] == ["req-1", "req-2"]
    assert batch.valid[1][1].principal == "shop-ä"


def test_parse_batch__body_with_whitespace__every_trace_with_a_key_twice_rejected():
    """Read whole, the body names its first repeated key only: each trace is still checked."""
    good = compact(trace_payload("req-1"))
    first = twice(compact(trace_payload("req-2")), b'"status":"ready"', b'"degraded"')
    second = twice(compact(trace_payload("req-3")), b'"decision":"irrelevant"', b'"selected"')
    batch = ingest.parse_batch(b'{"traces": [' + b", ".join([good, first, second]) + b"]}")
    assert [i for i, _ in batch.valid] == [0]
    assert duplicate_findings(batch) == [
        (1, "req-2", "status", "duplicate_key"),
        (2, "req-3", "candidates[2].decision", "duplicate_key"),
    ]


def test_parse_batch__key_twice_in_a_body_msgspec_refuses_for_a_string__still_rejected():
    """A lone surrogate elsewhere sends the batch through the lenient reading, whose
    re-encoding would keep one of the two keys: they are found before that."""
    lone = compact(trace_payload("req-1")).replace(b'"principal":"', b'"principal":"\\ud800', 1)
    bad = twice(compact(trace_payload("req-2")), b'"decision":"irrelevant"', b'"selected"')
    batch = ingest.parse_batch(batch_of(lone, bad, compact(trace_payload("req-3"))))
    assert [i for i, _ in batch.valid] == [2]
    assert [(r.index, r.errors[0].path, r.errors[0].code) for r in batch.rejected] == [
        (0, "principal", "invalid_string"),
        (1, "candidates[2].decision", "duplicate_key"),
    ]


def test_parse_batch__traces_twice_in_a_body_msgspec_refuses_for_a_string__400():
    lone = compact(trace_payload("req-1")).replace(b'"principal":"', b'"principal":"\\ud800', 1)
    with pytest.raises(ingest.BatchRefused) as refused:
        ingest.parse_batch(b'{"traces":[' + lone + b'],"traces":[]}')
    assert (refused.value.code, refused.value.path) == ("duplicate_key", "traces")


def sdk_trace(request_id: str) -> wire.Trace:
    """A trace as a runtime builds it with the SDK (sdk/README.md): the engine's selection,
    a relevance given as an int, the config resolution, a snapshot."""
    selection = select(
        strategy={
            "required": ["task_state"],
            "optional": ["recent_dialogue"],
            "budget": {"max_input_tokens": 8000},
        },
        candidates=[
            CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
            CandidateItem(id="chat:1", source="recent_dialogue", size=900, relevance=1),
            CandidateItem(id="chat:2", source="recent_dialogue", size=90, relevance=0.05),
        ],
        context_window=128_000,
    )
    return wire.Trace(
        request_id=request_id,
        agent="assistant_professional",
        occurred_at=datetime.now(UTC),
        strategy="after_sales_consultation",
        documents={"profile": 7, "after_sales_consultation": 3},
        principal="shop-ä/user-417",
        snapshot=msgspec.Raw(b'{"messages":[{"role":"user","text":"hi"}]}'),
        **selection.trace_fields(),
    )


ALLOWING = {"snapshot": {"allowed": True}}


def test_sdk_reporter_output__byte_identical_to_the_console_s_encoding_of_each_trace():
    """What the SDK's reporter sends, taken off the wire, is exactly the console's canonical
    encoding of the trace it decodes: the proof of `_repeated_in_trace` serves SDK traffic."""
    bodies = []

    class Console(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            bodies.append(body)
            answer = orjson.dumps({"accepted": body.count(b'"request_id"'), "duplicates": []})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Console)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reporter = TraceReporter(
        f"http://127.0.0.1:{server.server_port}",
        "ct_test",
        flush_interval=0.01,
        close_at_exit=False,
        spool_dir=None,  # the bytes sent are the subject, not the spool
    )
    try:
        reporter.report(sdk_trace("req-1"), resolution=Resolution("cached", 3, True))
        reporter.report(sdk_trace("req-2"), resolution=Resolution("fresh", 0.25, False))
        reporter.report(sdk_trace("req-3"), strategy=ALLOWING)
        assert reporter.flush(timeout=5)
    finally:
        reporter.close(timeout=1)
        server.shutdown()
    traces = [t for body in bodies for t in msgspec.json.decode(body, type=wire.Batch).traces]
    assert len(traces) == 3
    decoder = msgspec.json.Decoder(wire.Trace)
    for raw in traces:
        assert ingest._canonical.encode(decoder.decode(raw)) == bytes(raw)
    assert b'"relevance":1.0' in bytes(traces[0]) and b'"config_age_seconds":3.0' in bytes(
        traces[0]
    )
    assert bytes(decoder.decode(traces[2]).snapshot) != b"null"


def test_parse_batch__sdk_made_batch__proven_without_reading_any_trace_again(monkeypatch):
    """The fast path: SDK traces are proven by their own encoding, the envelope by its
    traces joined; only a snapshot is read (cheaply, when compact)."""

    read = []
    own_encoding = strict_json.own_encoding

    def read_again(*args, **kwargs):
        pytest.fail("a trace of the SDK was read again")

    def reencoded(raw):
        read.append(raw)
        return own_encoding(raw)

    monkeypatch.setattr(strict_json, "marked_loads", read_again)
    monkeypatch.setattr(strict_json, "own_encoding", reencoded)
    body = batch_of(
        encode_trace(sdk_trace("req-1"), resolution=Resolution("stale", 12, True)),
        encode_trace(sdk_trace("req-2")),
        encode_trace(sdk_trace("req-3"), strategy=ALLOWING),
    )
    batch = ingest.parse_batch(body)
    assert (len(batch.valid), batch.rejected) == (3, [])
    assert read == [b'{"messages":[{"role":"user","text":"hi"}]}'] == [batch.snapshots[2]]


def test_parse_batch__invalid_utf8_msgspec_lets_through__read_for_keys_and_still_named():
    """msgspec does not look inside the snapshot or a field it ignores: bytes there that are
    not UTF-8 are read anyway, for a key twice, and the snapshot's are still named."""
    bad_snapshot = compact(trace_payload("req-1", snapshot={"text": "@@"})).replace(
        b"@@", b"bad \xff bytes"
    )
    unknown = compact(trace_payload("req-2", later_field="@@")).replace(b"@@", b"\xff")
    unknown_twice = twice(unknown.replace(b"req-2", b"req-3"), b'"status":"ready"', b'"ready"')
    batch = ingest.parse_batch(batch_of(bad_snapshot, unknown, unknown_twice))
    assert [i for i, _ in batch.valid] == [1]
    assert duplicate_findings(batch) == [
        (0, "req-1", "snapshot.text", "invalid_string"),
        (2, "req-3", "status", "duplicate_key"),
    ]


def test_parse_batch__body_with_whitespace_and_bytes_not_utf8__key_twice_still_rejected():
    unknown = compact(trace_payload("req-1", later_field="@@")).replace(b"@@", b"\xff")
    bad = twice(compact(trace_payload("req-2")), b'"status":"ready"', b'"degraded"')
    batch = ingest.parse_batch(b'{"traces": [' + unknown + b", " + bad + b"]}")
    assert [i for i, _ in batch.valid] == [0]
    assert duplicate_findings(batch) == [(1, "req-2", "status", "duplicate_key")]

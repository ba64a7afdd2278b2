"""Issue 34.4's "Done when": a batch carrying a card number, an IBAN, an NRIC and an e-mail in
every free-text field stores none of them in any table, and erasure of a principal leaves no
row naming them (docs/data-protection.md).

Which fields: every TEXT field of `traces.redaction.fields.TRACE_FIELDS` (the registry a
unit test holds equal to the wire structs) gets the value; each IDENTIFIER field gets it in a
trace of its own, which is refused. Which tables: every table of the database, read back whole
(`SELECT t::text`, introspected, none listed by hand), each snapshot decrypted and each
trace's candidates decoded (stored compressed in its row: read as bytes they hide their text).
"""

from __future__ import annotations

import msgspec
import pytest
from django.db import connection

from console.kernel.audit import AuditAction
from console.kernel.models import AuditRecord
from tests.factories import (
    candidate,
    post_batch,
    runtime_token,
    snapshots_allowed,
    trace_payload,
    world,
)
from tests.factories.outcomes import outcome_kinds, post_outcomes
from tests.factories.traces import candidates_of
from traces import crypto
from traces.models import Erasure, RedactionRule, Snapshot, Trace
from traces.outcomes.models import Outcome
from traces.protection import services
from traces.redaction import fields

pytestmark = pytest.mark.django_db

CARD = "4111 1111 1111 1111"
IBAN = "DE89 3704 0044 0532 0130 00"
NRIC = "S1234567D"
EMAIL = "alice.tan@example.com"
PERSONAL = {"card": CARD, "iban": IBAN, "nric": NRIC, "email": EMAIL}
# What must not be found anywhere: each value as sent and without its spaces.
NEEDLES = sorted({v for value in PERSONAL.values() for v in (value, value.replace(" ", ""))})
PRINCIPAL = "shop-a/user-417"


def rows_of_every_table() -> list[tuple[str, str]]:
    """(table, row as text) of every table of the database, snapshots decrypted, candidates
    decoded."""
    found = []
    with connection.cursor() as cursor:
        # The database's own tables (public schema), not the ingest's session temp tables,
        # which are emptied at every commit (a test's transaction never commits).
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        for (table,) in cursor.fetchall():
            cursor.execute(f'SELECT t::text FROM "{table}" t')  # noqa: S608 (introspected names)
            found += [(table, text) for (text,) in cursor.fetchall()]
    for snapshot in Snapshot.objects.all():
        found.append(("traces_snapshot (decrypted)", crypto.decrypt(snapshot.ciphertext).decode()))
    for trace in Trace.objects.all():
        wire_candidates = [c.wire for c in candidates_of(trace)]
        found.append(
            ("traces_trace (candidates decoded)", msgspec.json.encode(wire_candidates).decode())
        )
    return found


def holding(needles) -> list[tuple[str, str]]:
    return [
        (table, needle)
        for table, text in rows_of_every_table()
        for needle in needles
        if needle.lower() in text.lower()
    ]


def put(data: dict, path: str, value: str) -> None:
    """Set `value` at a registry path of a trace payload: every item of a list, every key of a
    map (`documents{}` gains a key)."""
    head, _, rest = path.partition(".")
    if head.endswith("{}"):
        data[head[:-2]] = {value: 1, **data.get(head[:-2], {})}
    elif head.endswith("[]"):
        name = head[:-2]
        if not rest:
            data[name] = [value]
        else:
            for item in data[name]:
                put(item, rest, value)
    elif rest:
        if data.get(head) is None:
            data[head] = {}
        put(data[head], rest, value)
    else:
        data[head] = value


def full_trace(request_id: str) -> dict:
    """A trace with every optional block a runtime can send, so every field is present."""
    return trace_payload(
        request_id,
        principal=PRINCIPAL,
        selection={
            "engine": "context_runtime 0.4.0 rules 1a2b3c4d5e6f",
            "fixed_input_tokens": 10,
            "relevance_threshold": 0.2,
        },
        input_errors=[
            {"path": "candidates[0].relevance", "code": "nan", "message": "not a number"}
        ],
    )


@pytest.fixture
def sg():
    env = world()["environments"]["sg-test"]
    for detector in ("card", "iban", "email", "phone", "nric"):
        RedactionRule.objects.create(environment=env, key=detector, detector=detector)
    snapshots_allowed()
    outcome_kinds(env)
    return env


def test_every_free_text_field__no_personal_data_in_any_table__identifiers_refuse(client, sg):
    secret = runtime_token(sg)
    text_paths = [p for p, kind in fields.TRACE_FIELDS.items() if kind == fields.TEXT]
    traces = []
    for name, value in PERSONAL.items():
        trace = full_trace(f"req-{name}")
        for path in text_paths:
            put(trace, path, value)
        trace["snapshot"] = {
            "messages": [{"role": "user", "content": f"I am {NRIC}, {EMAIL}, card {CARD}"}],
            value: "a key that is personal data",
            "iban": IBAN,
        }
        traces.append(trace)
    identifiers = [p for p, kind in fields.TRACE_FIELDS.items() if kind == fields.IDENTIFIER]
    for i, path in enumerate(identifiers):
        trace = full_trace(f"req-id-{i}")
        trace["shadow"] = {"version": 3, "selected": ["task_state:T9"]}
        trace["sections"] = {"user_context": ["profile"], "query_context": ["time"]}
        trace["rollout"] = {"id": "ro-1", "arm": "new", "step": 0}
        put(trace, path, NRIC)
        traces.append(trace)

    response = post_batch(client, secret, traces)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["accepted"] == len(PERSONAL)
    refused = {r["index"]: r["errors"] for r in body["rejected"]}
    assert sorted(refused) == list(range(len(PERSONAL), len(traces)))
    codes = {path: refused[len(PERSONAL) + i][0]["code"] for i, path in enumerate(identifiers)}
    # Refused before the rules run, for what the value is: no such agent or strategy, not the
    # token's environment, a format an identity number does not fit.
    assert {p: c for p, c in codes.items() if c != "personal_data"} == {
        "agent": "unknown_agent",
        "environment": "environment_mismatch",
        "strategy": "required",
        "otel.trace_id": "invalid_format",
        "otel.span_id": "invalid_format",
    }
    for i in range(len(identifiers)):
        assert NRIC not in refused[len(PERSONAL) + i][0]["message"] or codes[identifiers[i]] in (
            "unknown_agent",
            "required",
        )

    # The stored traces keep markers and the count per rule; nothing personal anywhere.
    stored = Trace.objects.get(request_id="req-card")
    assert stored.model_name == "[redacted:card]"
    assert stored.redactions["card"] >= len(text_paths)
    assert candidates_of(stored)[0].reason == "[redacted:card]"
    snapshot = crypto.decrypt(Snapshot.objects.get(trace=stored).ciphertext).decode()
    assert "[redacted:nric]" in snapshot and "[redacted:card]" in snapshot

    # Outcomes: a label carrying personal data is refused; a clean one is stored.
    outcomes = post_outcomes(
        client,
        secret,
        [
            {"request_id": "req-card", "kind": "escalated", "value": True},
            {"request_id": "req-iban", "kind": "resolution", "value": EMAIL},
            {"request_id": EMAIL, "kind": "escalated", "value": True},
        ],
    ).json()
    assert outcomes["accepted"] == 1
    assert [r["errors"][0]["code"] for r in outcomes["rejected"]] == ["personal_data"] * 2

    assert holding(NEEDLES) == []


def test_erasure__no_row_names_the_principal__receipt_and_audit(client, sg, make_user):
    secret = runtime_token(sg)
    others = full_trace("req-other") | {"principal": "shop-a/user-9"}
    mine = [full_trace(f"req-mine-{i}") | {"snapshot": {"q": "hello"}} for i in range(3)]
    # A reason the runtime wrote with the person's reference in it: a kind of candidate of
    # theirs alone, which must not outlive their traces.
    mine[0]["candidates"].append(
        candidate("memo:1", source="memory", decision="irrelevant", reason=f"about {PRINCIPAL}")
    )
    assert post_batch(client, secret, [*mine, others]).json()["accepted"] == 4
    post_outcomes(
        client, secret, [{"request_id": "req-mine-0", "kind": "escalated", "value": True}]
    )
    assert holding([PRINCIPAL])  # named before

    admin = make_user("dpo", admin=None)
    erasure = services.principal_erase(principal=PRINCIPAL, reference="DPO-2026-17", actor=admin)

    assert holding([PRINCIPAL]) == []
    assert erasure.counts == {
        "traces_trace": 3,
        "candidates": 10,  # in the traces' rows, gone with them
        "traces_candidate_kind": 1,  # the kind only their traces named; the shared ones stay
        "traces_snapshot": 3,
        "traces_request_key": 3,
        "outcomes_outcome": 1,
    }
    assert len(erasure.removed["traces_trace"]) == 3
    assert Trace.objects.filter(principal="shop-a/user-9").count() == 1  # others untouched
    assert Outcome.objects.count() == 0
    record = AuditRecord.objects.get(action=AuditAction.PRINCIPAL_ERASE.value)
    assert record.after["principal_sha256"] == services.principal_digest(PRINCIPAL)
    assert Erasure.objects.get().principal_digest == services.principal_digest(PRINCIPAL)
    # Again: nothing names them, nothing is removed, nothing is written.
    with pytest.raises(services.NotFound):
        services.principal_erase(principal=PRINCIPAL, reference="DPO-2026-17", actor=admin)
    assert Erasure.objects.count() == 1

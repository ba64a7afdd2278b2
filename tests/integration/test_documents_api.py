"""Operator API for documents: drafts, optimistic concurrency, freeze, diff, validate, and bad
input answered with structured 4xx while nothing is written."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from context_runtime import vocabulary

from console.kernel.models import AuditRecord
from strategies.documents.models import Version
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    frozen_version,
    frozen_versions,
    manifest_body,
    profile_body,
    strategy_bodies_v1_to_v3,
    strategy_body,
    user_with_grants,
)

API = "/api/v1/agents/assistant_professional"
DOC = f"{API}/documents/after_sales_consultation"


@pytest.fixture
def documents(db):
    """assistant_professional with its profile (v1) and after_sales_consultation v1–v3, frozen
    by ops (its operator); assistant_lite with its profile (v1); bank-uat, whose runtime lacks
    the general_policy_only handler v3 falls back to, and prod, whose runtime has it."""
    professional = AgentFactory(key="assistant_professional")
    lite = AgentFactory(key="assistant_lite")
    ops = user_with_grants("ops", operator=professional)
    frozen_version(DocumentFactory(agent=professional, profile=True), profile_body(), actor=ops)
    frozen_versions(
        DocumentFactory(agent=professional, key="after_sales_consultation"),
        strategy_bodies_v1_to_v3(),
        actor=ops,
    )
    frozen_version(DocumentFactory(agent=lite, profile=True), profile_body())
    EnvironmentFactory(key="bank-uat", position=2, manifest=manifest_body(handlers=[]))
    EnvironmentFactory(key="prod", position=3, protected=True, manifest=manifest_body())
    return SimpleNamespace(professional=professional, lite=lite, ops=ops)


@pytest.fixture
def ops(client, documents):
    client.force_login(documents.ops)
    return client


def _json(client, method, url, data, **extra):
    return getattr(client, method)(
        url, data=json.dumps(data), content_type="application/json", **extra
    )


def _versions():
    return list(Version.objects.order_by("document_id", "number").values_list("pk", "revision"))


def test_agent_list__operator__sees_only_agents_in_scope(ops):
    response = ops.get("/api/v1/agents/")
    assert response.status_code == 200
    keys = [a["key"] for a in response.json()["results"]]
    assert keys == ["assistant_professional"]


def test_version_list__three_frozen_versions__newest_first_with_author(ops):
    response = ops.get(f"{DOC}/versions/")
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(r["number"], r["state"], r["author"]) for r in rows] == [
        (3, "frozen", "ops"),
        (2, "frozen", "ops"),
        (1, "frozen", "ops"),
    ]


def test_version_detail__v3__is_document_003_normalised(ops):
    body = ops.get(f"{DOC}/versions/3/").json()["body"]
    assert body["on_missing"] == {"order_delivery": "general_policy_only"}
    assert body["required"] == ["task_state", "order_delivery", "applicable_policy"]
    assert body["budget"] == {"max_input_tokens": 8000, "reserve_output_tokens": 1000}


def test_draft_journey__create_update_freeze_diff__through_api(ops):
    # Given the strategy at v3, when ops opens a draft with a smaller budget
    created = _json(ops, "post", f"{DOC}/draft/", {"body": strategy_body(), "note": "smaller"})
    assert created.status_code == 201, created.json()
    assert created.json()["number"] == 4 and created.json()["revision"] == 1
    # and saves it with the revision they read
    saved = _json(
        ops, "put", f"{DOC}/draft/", {"body": strategy_body(max_extra_reads=3), "revision": 1}
    )
    assert saved.status_code == 200 and saved.json()["revision"] == 2
    # and freezes it
    frozen = _json(ops, "post", f"{DOC}/draft/freeze/", {"revision": 2})
    assert frozen.status_code == 200 and frozen.json()["state"] == "frozen"
    # then the diff against v1 reads field by field
    changes = ops.get(f"{DOC}/diff/?a=1&b=4").json()["changes"]
    summaries = [c["summary"] for c in changes]
    assert "applicable_policy added to optional sources" in summaries
    assert "Max extra reads changed from 1 to 3" in summaries
    actions = list(AuditRecord.objects.values_list("action", flat=True).order_by("id"))
    assert actions[-3:] == ["draft.create", "draft.update", "version.freeze"]


def test_draft_update__stale_revision__409_with_current_and_nothing_written(ops):
    _json(ops, "post", f"{DOC}/draft/", {"body": strategy_body()})
    _json(ops, "put", f"{DOC}/draft/", {"body": strategy_body(max_extra_reads=2), "revision": 1})
    response = _json(
        ops, "put", f"{DOC}/draft/", {"body": strategy_body(max_extra_reads=5), "revision": 1}
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "stale_revision"
    assert error["current"]["revision"] == 2
    assert error["current"]["body"]["max_extra_reads"] == 2


def test_draft_create__invalid_body__400_with_errors_at_paths_and_nothing_written(ops):
    before = _versions()
    body = strategy_body(max_extra_reads=50, optional=["task_state"])
    response = _json(ops, "post", f"{DOC}/draft/", {"body": body})
    assert response.status_code == 400
    paths = {d["path"]: d["code"] for d in response.json()["error"]["details"]}
    assert paths["max_extra_reads"] == "out_of_range"
    assert "optional[0]" in paths
    assert _versions() == before


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"body": strategy_body(), "revison": 1}, "revison"),
        ({"note": "no body"}, "body"),
    ],
)
def test_draft_create__unknown_or_missing_field__400_names_it(ops, payload, path):
    before = _versions()
    response = _json(ops, "post", f"{DOC}/draft/", payload)
    assert response.status_code == 400
    assert path in [d["path"] for d in response.json()["error"]["details"]]
    assert _versions() == before


def test_draft_create__malformed_json__400_malformed_json(ops):
    response = ops.post(f"{DOC}/draft/", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"


def test_draft_create__body_over_64_kib__413_and_nothing_written(ops):
    before = _versions()
    huge = strategy_body(optional=[f"source_{i:06d}" for i in range(8000)])
    assert len(json.dumps(huge)) > vocabulary.MAX_BODY_BYTES
    response = _json(ops, "post", f"{DOC}/draft/", {"body": huge})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert _versions() == before


def test_draft_create__wrong_types__400_with_paths(ops):
    response = _json(ops, "post", f"{DOC}/draft/", {"body": {"required": "task_state"}})
    assert response.status_code == 400
    paths = [d["path"] for d in response.json()["error"]["details"]]
    assert "required" in paths and "budget" in paths


def test_unknown_agent__404_in_error_shape(ops):
    response = ops.get("/api/v1/agents/nobody/documents/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_agent_out_of_scope__404_like_missing(ops):
    response = ops.get("/api/v1/agents/assistant_lite/documents/")
    assert response.status_code == 404


def test_viewer__create_draft__403_and_nothing_written(client, documents):
    client.force_login(user_with_grants("viewer", viewer=documents.lite))
    before = _versions()
    response = _json(
        client,
        "post",
        "/api/v1/agents/assistant_lite/documents/profile/draft/",
        {"body": profile_body()},
    )
    assert response.status_code == 403
    assert _versions() == before


def test_profile_draft__operator_enables_sensitive_section__403_names_section(ops):
    body = profile_body(personal_particulars=True)
    response = _json(ops, "post", f"{API}/documents/profile/draft/", {"body": body})
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "sensitive_section"
    assert error["details"][0]["path"] == "sections.user_context.personal_particulars"
    assert not Version.objects.filter(state=Version.State.DRAFT).exists()


def test_profile_draft__admin_enables_sensitive_section__saved(client, documents):
    client.force_login(user_with_grants("admin", admin=None))
    body = profile_body(personal_particulars=True)
    response = _json(client, "post", f"{API}/documents/profile/draft/", {"body": body})
    assert response.status_code == 201


def test_validate__v3_against_bank_uat__names_missing_handler_without_saving(ops):
    before = _versions()
    v3 = ops.get(f"{DOC}/versions/3/").json()["body"]
    response = _json(
        ops, "post", f"{API}/validate", {"kind": "strategy", "body": v3, "environment": "bank-uat"}
    )
    assert response.status_code == 200
    report = response.json()
    assert report["errors"] == [] and report["valid"] is False
    assert [(e["path"], e["code"]) for e in report["manifest_errors"]] == [
        ("on_missing.order_delivery", "unknown_handler")
    ]
    ok = _json(
        ops, "post", f"{API}/validate", {"kind": "strategy", "body": v3, "environment": "prod"}
    )
    assert ok.json()["valid"] is True
    assert _versions() == before


def test_validate__unknown_environment__404_at_environment(ops):
    response = _json(
        ops,
        "post",
        f"{API}/validate",
        {"kind": "strategy", "body": strategy_body(), "environment": "mars"},
    )
    assert response.status_code == 404  # as everywhere an unknown environment is named
    assert response.json()["error"]["details"][0]["path"] == "environment"


def test_discard__open_draft__gone_and_audited(ops):
    _json(ops, "post", f"{DOC}/draft/", {"body": strategy_body()})
    response = ops.delete(f"{DOC}/draft/")
    assert response.status_code == 204
    assert not Version.objects.filter(state=Version.State.DRAFT).exists()
    assert AuditRecord.objects.filter(action="draft.discard").count() == 1


def test_freeze__no_draft__404_no_draft(ops):
    response = _json(ops, "post", f"{DOC}/draft/freeze/", {})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "no_draft"


def test_draft_create__json_nested_20000_deep__400_not_500(ops):
    before = _versions()
    deep = '{"body": ' + "[" * 20000 + "]" * 20000 + "}"
    response = ops.post(f"{DOC}/draft/", data=deep, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"
    assert _versions() == before

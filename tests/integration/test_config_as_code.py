"""Configuration as code (docs/CONFIG_AS_CODE.md): one file per agent, exported from the page,
the API and the command; imported with a dry run that writes nothing, then applied exactly as
planned — new versions, publishes where allowed, approval requests where protected — or not
at all. Export → import into an empty console → export gives the same bytes."""

from __future__ import annotations

import copy
import json
from io import StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from console.kernel.models import AccessLogEntry, AuditRecord
from strategies.catalog.models import Agent
from strategies.documents.models import Document, Version
from strategies.documents.services import draft_create, draft_discard
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent
from strategies.releases.services import approval_approve
from tests.factories import (
    SAMPLE_AGENT,
    STRATEGY_KEY,
    DocumentFactory,
    EnvironmentFactory,
    RoleFactory,
    frozen_versions,
    grant,
    manifest_body,
    profile_body,
    publish,
    release_setup,
    strategy_body,
    user_with_grants,
)

API = f"/api/v1/agents/{SAMPLE_AGENT}/config"
# The number a version the file adds gets here once the world's open draft (v4) is
# discarded: a discarded draft's number is never given again.
ADDED = 5


def build_world():
    """release_setup plus: a second strategy (two versions, nothing live), an open draft on
    the first, and live versions in sg-test, bank-uat and (approved) prod."""
    world = release_setup()
    envs, strategy, profile = world.envs, world.strategy, world.profile
    frozen_versions(
        DocumentFactory(agent=world.agent, key="order_status", name="Order status"),
        [strategy_body(optional=[]), strategy_body(max_extra_reads=3)],
        actor=world.ops,
    )
    publish(strategy[3], envs["sg-test"], actor=world.ops)
    publish(profile[1], envs["sg-test"], actor=world.ops)
    publish(strategy[2], envs["bank-uat"], actor=world.ops)  # bank-uat cannot serve v3
    publish(strategy[2], envs["prod"], actor=world.ops, approver=world.ops2)
    publish(profile[1], envs["prod"], actor=world.ops, approver=world.ops2)
    draft_create(
        document=strategy[3].document,
        body=strategy_body(budget={"max_input_tokens": 9000, "reserve_output_tokens": 900}),
        note="more room",
        actor=world.ops,
    )
    return world


def discard_drafts(world) -> None:
    for draft in Version.objects.filter(state="draft"):
        draft_discard(draft=draft, actor=world.ops)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def export(client, agent=SAMPLE_AGENT) -> bytes:
    response = client.get(f"/api/v1/agents/{agent}/config")
    assert response.status_code == 200, response.content
    return response.content


def post(client, data, *, dry_run=True, agent=SAMPLE_AGENT, **extra):
    return client.post(
        f"/api/v1/agents/{agent}/config",
        {"file": data, "dry_run": dry_run, **extra},
        content_type="application/json",
    )


def counts() -> dict:
    return {
        model.__name__: model.objects.count()
        for model in (Document, Version, Release, ReleaseEvent, ApprovalRequest, AuditRecord, Agent)
    }


def document(data, key) -> dict:
    return next(d for d in data["documents"] if d["key"] == key)


# --- the file ---------------------------------------------------------------------------------------
def test_export__world__one_stable_file_with_versions_draft_and_live_map(db):
    world = build_world()
    text = export(client_for(world.ops)).decode()
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert (data["format"], data["format_version"]) == ("context-console/agent-config", 1)
    assert [d["key"] for d in data["documents"]] == ["profile", STRATEGY_KEY, "order_status"]
    strategy = document(data, STRATEGY_KEY)
    assert [v["number"] for v in strategy["versions"]] == [1, 2, 3]
    assert strategy["draft"]["number"] == 4 and strategy["draft"]["note"] == "more room"
    assert data["live"] == {
        "sg-test": {"profile": 1, STRATEGY_KEY: 3},
        "bank-uat": {STRATEGY_KEY: 2},
        "prod": {"profile": 1, STRATEGY_KEY: 2},
    }
    # nothing that differs between consoles: no ids, times or user names
    for word in ("ops", "created_at", "frozen_at", '"id"', "author"):
        assert word not in text.replace("ops2", "").replace("order", "")
    # an export is a read of configuration: access-logged, not audited
    row = AccessLogEntry.objects.get(action="config.export")
    assert (row.actor_label, row.agent_key) == ("ops", SAMPLE_AGENT)
    assert not AuditRecord.objects.filter(action__startswith="config.").exists()


def test_export__more_documents_and_versions__same_number_of_queries(
    db, django_assert_max_num_queries
):
    world = build_world()
    client = client_for(world.ops)
    export(client)  # warm the session and the grants
    with django_assert_max_num_queries(20) as small:
        export(client)
    for _ in range(5):
        frozen_versions(DocumentFactory(agent=world.agent), [strategy_body()] * 3, actor=world.ops)
    with django_assert_max_num_queries(len(small.captured_queries)):
        export(client)


def test_export_page__agent_page_link__downloads_the_same_file(db):
    world = build_world()
    client = client_for(world.ops)
    page = client.get(reverse("agent-strategies", kwargs={"agent": SAMPLE_AGENT}))
    assert b"Export configuration" in page.content and b"Import configuration" in page.content
    response = client.get(reverse("config-export", kwargs={"agent": SAMPLE_AGENT}))
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="{SAMPLE_AGENT}.config.json"'
    assert response.content == export(client)


# --- the round trip ---------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_round_trip__export_import_into_empty_console_export__identical_bytes():
    # Given an agent with versions, a draft and live versions in three environments, exported
    world = build_world()
    first = export(client_for(world.admin))
    # When the console is emptied, only its environments, manifests and people made again,
    call_command("flush", interactive=False, verbosity=0)
    EnvironmentFactory(key="sg-test", position=1, manifest=manifest_body())
    EnvironmentFactory(key="bank-uat", position=2, manifest=manifest_body(handlers=[]))
    EnvironmentFactory(key="prod", position=3, protected=True, manifest=manifest_body())
    admin = user_with_grants("admin", admin=None)
    second_admin = user_with_grants("admin2", admin=None)
    assert not Agent.objects.exists()
    # and the file imported by an admin (the agent is created), prod's requests approved by
    # a second person
    response = post(client_for(admin), json.loads(first), dry_run=False)
    assert response.status_code == 200, response.content
    outcome = response.json()["outcome"]
    assert sorted((r["document"], r["environment"]) for r in outcome["approval_requests"]) == [
        (STRATEGY_KEY, "prod"),
        ("profile", "prod"),
    ]
    assert not Release.objects.filter(environment__key="prod").exists()
    for approval in ApprovalRequest.objects.filter(status="pending"):
        approval_approve(approval=approval, actor=second_admin)
    # Then exporting again gives the very same bytes
    assert export(client_for(admin)) == first
    assert AuditRecord.objects.filter(action="config.import", actor_label="admin").count() == 1


def test_import__unchanged_file__nothing_to_change_nothing_written(db):
    world = build_world()
    client = client_for(world.ops)
    data = json.loads(export(client))
    before = counts()
    response = post(client, data, dry_run=False)
    assert response.status_code == 200, response.content
    plan = response.json()["plan"]
    assert plan["changes_anything"] is False
    assert {d["action"] for d in plan["documents"]} == {"unchanged"}
    assert {r["action"] for r in plan["releases"]} == {"unchanged"}
    after = counts()
    assert after.pop("AuditRecord") == before.pop("AuditRecord") + 1  # the config.import row
    assert after == before


# --- the dry run ----------------------------------------------------------------------------------
def test_dry_run__changed_budget__plain_english_changes_and_findings_nothing_written(db):
    # Given the exported file with a new version of the strategy (a larger budget), meant
    # to go live in sg-test and bank-uat
    world = build_world()
    discard_drafts(world)
    client = client_for(world.ops)
    data = json.loads(export(client))
    strategy = document(data, STRATEGY_KEY)
    new = copy.deepcopy(strategy["versions"][1])  # v2, which bank-uat can serve
    new.update(number=4, note="bigger budget")
    new["body"]["budget"]["max_input_tokens"] = 7000
    strategy["versions"].append(new)
    data["live"]["sg-test"][STRATEGY_KEY] = 4
    data["live"]["bank-uat"][STRATEGY_KEY] = 4
    before = counts()
    # When it is planned
    response = post(client, data)
    # Then the plan says what changes, in the console's words, and writes nothing
    assert response.status_code == 200, response.content
    plan = response.json()["plan"]
    [step] = [s for s in document(plan, STRATEGY_KEY)["versions"] if s["action"] == "create"]
    assert step["number"] == ADDED
    changes = {c["path"]: c["summary"] for c in step["changes"]}
    assert "budget.max_input_tokens" in changes and "7000" in changes["budget.max_input_tokens"]
    releases = {(r["environment"], r["document"]): r for r in plan["releases"]}
    sg = releases[("sg-test", STRATEGY_KEY)]
    assert (sg["live_number"], sg["number"], sg["action"]) == (3, ADDED, "publish")
    assert releases[("bank-uat", STRATEGY_KEY)]["findings"] == []
    assert releases[("prod", STRATEGY_KEY)]["action"] == "unchanged"
    assert counts() == before


def test_dry_run__version_bank_uat_cannot_serve__400_finding_at_path_with_environment(db):
    world = build_world()
    client = client_for(world.ops)
    data = json.loads(export(client))
    data["live"]["bank-uat"][STRATEGY_KEY] = 3  # v3 falls back to general_policy_only
    before = counts()
    response = post(client, data, dry_run=False)
    assert response.status_code == 400
    error = response.json()["error"]
    [finding] = [d for d in error["details"] if d.get("environment") == "bank-uat"]
    assert finding["path"] == "documents[1].versions[2].body.on_missing.order_delivery"
    assert "bank-uat" in finding["message"]
    assert error["plan"]["valid"] is False
    assert counts() == before


# --- bad files ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "path", "code"),
    [
        (lambda d: d.update(extra=1), "extra", "unknown_field"),
        (lambda d: d.update(format="something"), "format", "invalid"),
        (lambda d: d["documents"][1].pop("versions"), "documents[1].versions", "required"),
        (
            lambda d: d["documents"][1]["versions"][0].update(number=7),
            "documents[1].versions[1].number",
            "invalid",
        ),
        (
            lambda d: d["documents"][1]["versions"][2]["body"].update(max_extra_reads=99),
            "documents[1].versions[2].body.max_extra_reads",
            None,
        ),
        (
            lambda d: d["documents"][1]["versions"][0]["body"]["budget"].update(
                max_input_tokens="lots"
            ),
            "documents[1].versions[0].body.budget.max_input_tokens",
            None,
        ),
        (lambda d: d["live"].update({"eu-prod": {}}), "live.eu-prod", "unknown_environment"),
        (lambda d: d["live"]["prod"].update(profile=9), "live.prod.profile", "unknown_version"),
        (lambda d: d["agent"].update(key="assistant_lite"), "agent.key", "other_agent"),
    ],
)
def test_import__bad_file__400_every_finding_at_its_path_nothing_written(db, change, path, code):
    world = build_world()
    client = client_for(world.ops)
    data = json.loads(export(client))
    change(data)
    before = counts()
    for dry_run in (True, False):
        response = post(client, data, dry_run=dry_run)
        assert response.status_code == 400, response.content
        details = response.json()["error"]["details"]
        assert path in [d["path"] for d in details], details
        if code:
            assert code in [d["code"] for d in details if d["path"] == path]
    assert counts() == before


def test_import__two_mistakes__both_reported(db):
    world = build_world()
    client = client_for(world.ops)
    data = json.loads(export(client))
    data["surprise"] = True
    data["documents"][2]["versions"][1]["body"]["max_extra_reads"] = -1
    response = post(client, data)
    assert response.status_code == 400
    paths = {d["path"] for d in response.json()["error"]["details"]}
    assert "surprise" in paths  # the structure is judged before the bodies


def test_import__envelope_unknown_key_and_oversize__400_and_413(db):
    world = build_world()
    client = client_for(world.ops)
    data = json.loads(export(client))
    response = post(client, data, dryrun=True)
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["path"] == "dryrun"
    big = copy.deepcopy(data)
    big["documents"][1]["versions"][0]["note"] = "x" * (1024 * 1024)
    before = counts()
    assert post(client, big).status_code == 413  # the file over 1 MiB
    big["documents"][1]["versions"][0]["note"] = "x" * (1024 * 1024 + 9 * 1024)
    assert post(client, big).status_code == 413  # the request over 1 MiB + its envelope
    assert counts() == before


# --- applying ---------------------------------------------------------------------------------------
def _file_with_new_budget(client, *, environments=("sg-test", "prod")) -> dict:
    return with_new_budget(json.loads(export(client)), environments=environments)


def with_new_budget(data: dict, *, environments) -> dict:
    """The file with v4 of the strategy (v3 with a larger budget), live in `environments`."""
    data = copy.deepcopy(data)
    strategy = document(data, STRATEGY_KEY)
    strategy["draft"] = None
    new = copy.deepcopy(strategy["versions"][-1])
    new.update(number=4, note="bigger budget")
    new["body"]["budget"]["max_input_tokens"] = 8500
    strategy["versions"].append(new)
    for env in environments:
        data["live"][env][STRATEGY_KEY] = 4
    return data


def test_apply__new_version__created_published_and_requested_in_protected(db):
    world = build_world()
    discard_drafts(world)  # no open draft in the way
    client = client_for(world.ops)
    data = _file_with_new_budget(client)
    response = post(client, data, dry_run=False)
    assert response.status_code == 200, response.content
    outcome = response.json()["outcome"]
    assert outcome["versions_created"] == [{"document": STRATEGY_KEY, "number": ADDED}]
    v4 = Version.objects.get(document__key=STRATEGY_KEY, number=ADDED)
    assert v4.state == "frozen" and v4.note == "bigger budget"
    assert Release.objects.get(document=v4.document, environment__key="sg-test").version == v4
    [request] = outcome["approval_requests"]
    approval = ApprovalRequest.objects.get(pk=request["approval"])
    assert (approval.environment.key, approval.version, approval.status) == ("prod", v4, "pending")
    assert Release.objects.get(document=v4.document, environment__key="prod").version.number == 2
    # frozen versions were never rewritten; the audit names the person
    assert AuditRecord.objects.filter(action="version.freeze", actor_label="ops").exists()
    # applying the same file again changes nothing (v4 is there, the request waits)
    again = post(client, data, dry_run=False).json()["plan"]
    assert again["counts"]["versions_created"] == 0
    assert [r["action"] for r in again["releases"] if r["environment"] == "prod"] == [
        "unchanged",
        "skip",
    ]


def test_apply__open_draft_in_the_way__400_nothing_written(db):
    world = build_world()
    client = client_for(world.ops)
    data = _file_with_new_budget(client)
    before = counts()
    response = post(client, data, dry_run=False)
    assert response.status_code == 400
    [finding] = [d for d in response.json()["error"]["details"] if d["code"] == "draft_open"]
    assert finding["path"] == "documents[1]"
    assert counts() == before


def test_apply__user_may_not_publish_there__skipped_not_allowed(db, make_user):
    world = build_world()
    discard_drafts(world)
    editor = make_user("editor")
    grant(
        editor, RoleFactory(name="editor", capabilities=["view_config", "edit_drafts"]), world.agent
    )
    client = client_for(editor)
    response = post(client, _file_with_new_budget(client_for(world.ops)), dry_run=False)
    assert response.status_code == 200, response.content
    outcome = response.json()["outcome"]
    assert outcome["versions_created"] == [{"document": STRATEGY_KEY, "number": ADDED}]
    assert {s["environment"] for s in outcome["skipped"]} == {"sg-test", "prod"}
    assert all("Not allowed" in s["reason"] for s in outcome["skipped"])
    assert not outcome["published"] and not outcome["approval_requests"]


def test_apply__stale_plan_hash__409_with_new_plan_nothing_written(db):
    world = build_world()
    discard_drafts(world)
    client = client_for(world.ops)
    data = _file_with_new_budget(client)
    reviewed = post(client, data).json()["plan"]["plan"]
    publish(world.strategy[1], world.envs["sg-test"], actor=world.ops)  # the console moves
    before = counts()
    response = post(client, data, dry_run=False, plan=reviewed)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "plan_changed"
    assert response.json()["error"]["current"]["plan"] != reviewed
    assert counts() == before


# --- who may -------------------------------------------------------------------------------------------
def test_access__viewer_403_out_of_scope_404_unknown_agent_needs_manage_catalog(db, make_user):
    world = build_world()
    data = json.loads(export(client_for(world.ops)))
    viewer = make_user("viewer_x", viewer=SAMPLE_AGENT)
    stranger = make_user("stranger", operator=DocumentFactory().agent)
    before = counts()
    assert post(client_for(viewer), data).status_code == 403
    assert client_for(stranger).get(API).status_code == 404
    assert post(client_for(stranger), data).status_code == 404
    data["agent"]["key"] = "brand_new"
    assert post(client_for(world.ops), data, agent="brand_new").status_code == 404
    assert counts() == before
    response = post(client_for(world.admin), data, dry_run=True, agent="brand_new")
    assert response.status_code == 200, response.content
    assert response.json()["plan"]["agent"]["action"] == "create"


# --- the commands ------------------------------------------------------------------------------------------
def test_commands__export_import_dry_run_and_as_user__same_code_audited(db, tmp_path):
    world = build_world()
    discard_drafts(world)
    path = tmp_path / "agent.json"
    call_command("export_agent", SAMPLE_AGENT, str(path), stderr=StringIO())
    assert path.read_bytes() == export(client_for(world.ops))
    path.write_text(json.dumps(_file_with_new_budget(client_for(world.ops))))
    before = counts()
    out = StringIO()
    call_command("import_agent", SAMPLE_AGENT, str(path), "--dry-run", "--as", "ops", stdout=out)
    assert f"{STRATEGY_KEY}: would add v{ADDED}" in out.getvalue()
    assert "max input tokens" in out.getvalue().lower()
    assert counts() == before
    out = StringIO()
    call_command("import_agent", SAMPLE_AGENT, str(path), "--as", "ops", stdout=out)
    assert f"sg-test/{STRATEGY_KEY}: publish v{ADDED}" in out.getvalue()
    assert "approval request #" in out.getvalue()
    assert AuditRecord.objects.get(action="config.import").actor_label == "ops"


def test_commands__without_as__documents_only_publishes_skipped(db, tmp_path):
    discard_drafts(build_world())
    path = tmp_path / "agent.json"
    call_command("export_agent", SAMPLE_AGENT, str(path), stderr=StringIO())
    data = json.loads(path.read_text())
    path.write_text(json.dumps(with_new_budget(data, environments=("sg-test",))))
    out = StringIO()
    call_command("import_agent", SAMPLE_AGENT, str(path), stdout=out)
    assert "skipped — Publishing needs a person" in out.getvalue()
    assert Version.objects.get(document__key=STRATEGY_KEY, number=ADDED).author_label == "system"
    assert AuditRecord.objects.get(action="config.import").actor_label == "system"


def test_commands__bad_file__error_lists_paths_nothing_written(db, tmp_path):
    build_world()
    path = tmp_path / "agent.json"
    call_command("export_agent", SAMPLE_AGENT, str(path), stderr=StringIO())
    data = json.loads(path.read_text())
    data["documents"][1]["versions"][2]["body"]["max_extra_reads"] = 99
    path.write_text(json.dumps(data))
    before = counts()
    with pytest.raises(CommandError, match=r"documents\[1\]\.versions\[2\]\.body\.max_extra_reads"):
        call_command("import_agent", SAMPLE_AGENT, str(path), "--as", "ops", stdout=StringIO())
    path.write_text("{not json")
    with pytest.raises(CommandError, match="not valid JSON"):
        call_command("import_agent", SAMPLE_AGENT, str(path), stdout=StringIO())
    assert counts() == before


def test_import__into_another_agent_key__agent_and_documents_created_empty_ones_too(db):
    # Given a file with a document that has no version yet, made the file of a new agent
    world = build_world()
    DocumentFactory(agent=world.agent, key="empty_task")
    data = json.loads(export(client_for(world.admin)))
    data["agent"].update(key="assistant_copy", name="Copy")
    data["live"] = {"sg-test": data["live"]["sg-test"]}
    # When an admin applies it to that agent
    response = post(client_for(world.admin), data, dry_run=False, agent="assistant_copy")
    # Then the agent, its documents (the empty one too) and the open draft are created
    assert response.status_code == 200, response.content
    copy_file = json.loads(export(client_for(world.admin), agent="assistant_copy"))
    assert copy_file["documents"] == data["documents"]
    assert copy_file["live"] == data["live"]
    assert Agent.objects.get(key="assistant_copy").name == "Copy"


# --- the page ----------------------------------------------------------------------------------------
def _upload(client, text: str, **extra):
    url = reverse("config-import", kwargs={"agent": SAMPLE_AGENT})
    upload = SimpleUploadedFile("agent.json", text.encode(), content_type="application/json")
    return client.post(url, {"file": upload, **extra})


def test_import_page__upload_dry_run_then_apply__the_planned_version_is_created(db):
    world = build_world()
    discard_drafts(world)
    client = client_for(world.ops)
    url = reverse("config-import", kwargs={"agent": SAMPLE_AGENT})
    assert client.get(url).status_code == 200
    data = _file_with_new_budget(client)
    before = counts()
    # the dry run: the plain-English change and the Apply button bound to the plan
    response = _upload(client, json.dumps(data))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Dry run" in page and f"New version <strong>v{ADDED}</strong>" in page
    assert "8500" in page and "approval request" in page
    assert counts() == before
    plan = response.context["plan_hash"]
    content = response.context["content"]
    # a changed file is planned again, not applied
    changed = content.replace("8500", "8600")
    stale = client.post(url, {"apply": "1", "plan": plan, "content": changed})
    assert stale.status_code == 409 and "changed since the dry run" in stale.content.decode()
    assert counts() == before
    # the reviewed one is applied
    applied = client.post(url, {"apply": "1", "plan": plan, "content": content})
    assert applied.status_code == 200
    assert "Configuration applied" in applied.content.decode()
    assert Version.objects.get(document__key=STRATEGY_KEY, number=ADDED).body["budget"] == {
        "max_input_tokens": 8500,
        "reserve_output_tokens": 1000,
    }


def test_import_page__malformed_and_invalid_files__400_findings_nothing_written(db):
    world = build_world()
    client = client_for(world.ops)
    before = counts()
    response = _upload(client, "{ not json")
    assert response.status_code == 400 and "Not valid JSON" in response.content.decode()
    pasted = client.post(reverse("config-import", kwargs={"agent": SAMPLE_AGENT}), {"text": "[]"})
    assert pasted.status_code == 400 and "The file must be an object" in pasted.content.decode()
    data = json.loads(export(client))
    data["documents"][1]["versions"][0]["body"]["max_extra_reads"] = 99
    response = _upload(client, json.dumps(data))
    assert response.status_code == 400
    assert "documents[1].versions[0].body.max_extra_reads" in response.content.decode()
    viewer = user_with_grants("viewer_y", viewer=SAMPLE_AGENT)
    assert _upload(client_for(viewer), json.dumps(data)).status_code == 403
    assert counts() == before


def test_import__switches_on_sensitive_section_without_permission__400_nothing_written(db):
    # Given ops (no enable_sensitive) and a file whose new profile version turns one on
    world = build_world()
    client = client_for(world.ops)
    data = json.loads(export(client))
    profile = document(data, "profile")
    profile["versions"].append({"number": 2, "note": "", "body": profile_body(state_of_mind=True)})
    before = counts()
    response = post(client, data, dry_run=False)
    assert response.status_code == 400
    [finding] = [d for d in response.json()["error"]["details"] if d["code"] == "sensitive_section"]
    assert finding["path"].startswith("documents[0].versions[1].body.sections.")
    assert finding["path"].endswith(".state_of_mind")
    assert counts() == before
    # an admin may: the same file applies
    assert post(client_for(world.admin), data, dry_run=False).status_code == 200

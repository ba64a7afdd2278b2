"""One admin alone cannot get a version live in a protected environment (issue 19, item 3).

Relaxing a protected environment's protection or revert policy is refused unless it is an
explicit break-glass (a reason, its own audit action, a banner while it lasts); what goes
live while it lasts is marked unreviewed and is never offered as a rollback target."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from console.kernel.models import AuditRecord
from strategies.catalog.models import Environment
from strategies.releases.models import Release, ReleaseEvent
from tests.factories import publish, release_setup

ENV = "/api/v1/environments/prod/"
API = "/api/v1/agents/assistant_professional"
DOC = f"{API}/documents/after_sales_consultation/releases"


@pytest.fixture
def world(db):
    return release_setup()


def send(client, method, url, data, user):
    client.force_login(user)
    return getattr(client, method)(url, data=json.dumps(data), content_type="application/json")


def test_three_calls__one_admin_relaxes_prod_publishes_restores__refused_nothing_live(
    client, world
):
    # Given prod is protected and one admin alone
    # When they switch protection off, publish and switch it on again
    relaxed = send(client, "patch", ENV, {"protected": False}, world.admin)
    published = send(client, "post", f"{DOC}/prod/", {"version": 2, "reason": "x"}, world.admin)

    # Then the first call is refused and the publish only asks a second person
    assert relaxed.status_code == 409, relaxed.json()
    error = relaxed.json()["error"]
    assert error["code"] == "break_glass_required"
    assert [d["path"] for d in error["details"]] == ["protected"]
    assert Environment.objects.get(key="prod").protected is True
    assert published.status_code == 202
    assert not Release.objects.filter(environment__key="prod").exists()


def test_revert_policy__one_admin_switches_it_off__refused(client, world):
    prod = world.envs["prod"]
    prod.rollback_needs_approval = True
    prod.save()

    response = send(client, "patch", ENV, {"rollback_needs_approval": False}, world.admin)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "break_glass_required"
    assert Environment.objects.get(key="prod").rollback_needs_approval is True
    assert not AuditRecord.objects.filter(action__startswith="environment.").exists()


def break_glass(client, world, reason="INC-4711: fraud rule hotfix, approver unreachable", **flags):
    response = send(
        client,
        "patch",
        ENV,
        {"protected": False, **flags, "break_glass_reason": reason},
        world.admin,
    )
    assert response.status_code == 200, response.json()
    return response.json()


def restore(client, world, **flags):
    response = send(client, "patch", ENV, flags or {"protected": True}, world.admin)
    assert response.status_code == 200, response.json()
    return response.json()


def test_break_glass__reason_given__relaxed_audited_as_break_glass_and_shown(client, world):
    body = break_glass(client, world)

    assert body["protected"] is False
    assert body["break_glass"]["by"] == "admin"
    assert body["break_glass"]["reason"].startswith("INC-4711")
    assert body["break_glass"]["relaxed"] == ["protected"]
    record = AuditRecord.objects.get(action="environment.break_glass")
    assert record.actor_label == "admin"
    assert record.after["break_glass"]["reason"].startswith("INC-4711")
    assert {c["path"] for c in record.changes} >= {"protected"}
    assert not AuditRecord.objects.filter(action="environment.update").exists()
    assert client.get(ENV).json()["break_glass"]["relaxed"] == ["protected"]


@pytest.mark.parametrize(
    ("reason", "status", "code"),
    [
        ("", 409, "break_glass_required"),
        ("  ", 409, "break_glass_required"),
        ("ok", 400, "required"),
    ],
)
def test_break_glass__blank_or_too_short_reason__refused_nothing_saved(
    client, world, reason, status, code
):
    response = send(
        client, "patch", ENV, {"protected": False, "break_glass_reason": reason}, world.admin
    )

    assert response.status_code == status, response.json()
    error = response.json()["error"]
    path = "protected" if status == 409 else "break_glass_reason"
    assert [(d["path"], d["code"]) for d in error["details"]] == [
        (path, code if status == 400 else "break_glass_required")
    ]
    prod = Environment.objects.get(key="prod")
    assert (prod.protected, prod.break_glass_at) == (True, None)
    assert not AuditRecord.objects.filter(action__startswith="environment.").exists()


def test_tightening__no_reason_needed__plain_update(client, world):
    response = send(
        client,
        "patch",
        "/api/v1/environments/sg-test/",
        {"protected": True, "rollback_needs_approval": True},
        world.admin,
    )

    assert response.status_code == 200
    assert response.json()["break_glass"] is None
    assert AuditRecord.objects.filter(action="environment.update").count() == 1


def test_break_glass__publish__live_marked_unreviewed_in_release_history_and_audit(client, world):
    break_glass(client, world)

    response = send(client, "post", f"{DOC}/prod/", {"version": 2, "reason": "hotfix"}, world.admin)

    assert response.status_code == 200, response.json()
    assert response.json()["release"]["unreviewed"] is True
    history = client.get(f"{API}/releases/history/?environment=prod").json()["results"]
    assert [(e["to_version"], e["unreviewed"]) for e in history] == [(2, True)]
    listed = client.get(f"{API}/releases/").json()["documents"]
    strategy = next(d for d in listed if d["key"] == "after_sales_consultation")
    assert strategy["releases"]["prod"]["unreviewed"] is True
    audit = AuditRecord.objects.get(action="release.publish", target_label__contains="prod")
    assert audit.after["unreviewed"] is True
    assert audit.after["break_glass_reason"].startswith("INC-4711")


def test_restore__ends_break_glass__next_publish_asks_a_second_person_again(client, world):
    break_glass(client, world)

    body = restore(client, world)

    assert body["break_glass"] is None
    assert AuditRecord.objects.filter(action="environment.break_glass_end").count() == 1
    response = send(client, "post", f"{DOC}/prod/", {"version": 2, "reason": "x"}, world.admin)
    assert response.status_code == 202


def test_unreviewed_version__not_a_rollback_target__api_409_page_does_not_offer_it(client, world):
    # Given v1 went live in prod with approval, v2 by break-glass, then v3 with approval
    publish(world.strategy[1], world.envs["prod"], actor=world.ops, approver=world.ops2)
    break_glass(client, world)
    send(client, "post", f"{DOC}/prod/", {"version": 2, "reason": "hotfix"}, world.admin)
    restore(client, world)
    prod = Environment.objects.get(key="prod")
    publish(world.strategy[3], prod, actor=world.ops, approver=world.ops2)

    # When the admin rolls back to v2
    before = ReleaseEvent.objects.count()
    response = send(
        client, "post", f"{DOC}/prod/rollback/", {"version": 2, "reason": "back"}, world.admin
    )

    # Then it is refused: v2 went live unreviewed; v1 still is a target
    assert response.status_code == 409, response.json()
    assert response.json()["error"]["code"] == "unreviewed_version"
    assert ReleaseEvent.objects.count() == before
    page = client.get(
        reverse(
            "release-rollback", args=["assistant_professional", "after_sales_consultation", "prod"]
        )
    )
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="version" value="1"' in html
    assert 'name="version" value="2"' not in html
    assert "went live in prod unreviewed" in html
    ok = send(
        client,
        "post",
        f"{DOC}/prod/rollback/",
        {"version": 1, "reason": "v3 regressed"},
        world.admin,
    )
    assert ok.status_code == 200, ok.json()


def test_revert_policy_break_glass__rollback_at_once_is_marked_unreviewed(client, world):
    prod = world.envs["prod"]
    prod.rollback_needs_approval = True
    prod.save()
    publish(world.strategy[1], prod, actor=world.ops, approver=world.ops2)
    publish(world.strategy[2], prod, actor=world.ops, approver=world.ops2)
    relaxed = send(
        client,
        "patch",
        ENV,
        {"rollback_needs_approval": False, "break_glass_reason": "INC-9: v2 breaks refunds"},
        world.admin,
    )
    assert relaxed.status_code == 200
    assert relaxed.json()["break_glass"]["relaxed"] == ["rollback_needs_approval"]

    response = send(
        client, "post", f"{DOC}/prod/rollback/", {"version": 1, "reason": "refunds"}, world.admin
    )

    assert response.status_code == 200, response.json()
    assert response.json()["release"]["unreviewed"] is True
    assert ReleaseEvent.objects.get(action="rollback").unreviewed is True
    # protection itself was not relaxed: a publish still asks a second person
    again = send(client, "post", f"{DOC}/prod/", {"version": 3, "reason": "x"}, world.admin)
    assert again.status_code == 202
    ended = restore(client, world, rollback_needs_approval=True)
    assert ended["break_glass"] is None


def test_break_glass__approved_request_applied_meanwhile__not_unreviewed(client, world):
    waiting = publish(world.strategy[1], world.envs["prod"], actor=world.ops)
    break_glass(client, world)

    send(client, "post", f"/api/v1/approvals/{waiting.pk}/approve/", {}, world.ops2)

    release = Release.objects.get(environment__key="prod")
    assert (release.version.number, release.unreviewed) == (1, False)


# --- the other ways one person gets a version live ----------------------------------------------
def test_promotion__during_break_glass__goes_live_marked_unreviewed(client, world):
    publish(world.strategy[2], world.envs["sg-test"], actor=world.ops)
    break_glass(client, world)

    response = send(
        client,
        "post",
        f"{API}/promote/",
        {
            "source": "sg-test",
            "target": "prod",
            "documents": ["after_sales_consultation"],
            "reason": "hotfix",
        },
        world.admin,
    )

    assert response.status_code == 200, response.json()
    [item] = response.json()["results"]
    assert (item["outcome"], item["release"]["unreviewed"]) == ("published", True)
    assert ReleaseEvent.objects.get(release__environment__key="prod").unreviewed is True


def test_promotion__protected__asks_a_second_person_nothing_unreviewed(client, world):
    publish(world.strategy[2], world.envs["sg-test"], actor=world.ops)

    response = send(
        client,
        "post",
        f"{API}/promote/",
        {"source": "sg-test", "target": "prod", "reason": "release train"},
        world.admin,
    )

    assert response.status_code == 202
    assert not Release.objects.filter(environment__key="prod").exists()


def config_file(client, world) -> dict:
    client.force_login(world.admin)
    data = json.loads(client.get(f"{API}/config").content)
    strategy = next(d for d in data["documents"] if d["key"] == "after_sales_consultation")
    strategy["draft"] = None
    data["live"].setdefault("prod", {})["after_sales_consultation"] = 2
    return data


def test_import__during_break_glass__dry_run_says_unreviewed_apply_marks_it(client, world):
    break_glass(client, world)
    data = config_file(client, world)

    plan = send(client, "post", f"{API}/config", {"file": data, "dry_run": True}, world.admin)
    applied = send(client, "post", f"{API}/config", {"file": data, "dry_run": False}, world.admin)

    assert plan.status_code == 200, plan.json()
    [step] = [
        r
        for r in plan.json()["plan"]["releases"]
        if r["environment"] == "prod" and r["document"] == "after_sales_consultation"
    ]
    assert step["action"] == "publish"
    assert "goes live unreviewed" in step["reason"]
    assert applied.status_code == 200, applied.json()
    release = Release.objects.get(environment__key="prod", document__key="after_sales_consultation")
    assert (release.version.number, release.unreviewed) == (2, True)


def test_import__protected__an_approval_request_never_live_alone(client, world):
    data = config_file(client, world)

    applied = send(client, "post", f"{API}/config", {"file": data, "dry_run": False}, world.admin)

    assert applied.status_code == 200, applied.json()
    assert [r["environment"] for r in applied.json()["outcome"]["approval_requests"]] == ["prod"]
    assert not Release.objects.filter(environment__key="prod").exists()


# --- the environment form --------------------------------------------------------------------------
def edit_form(client, world, **changes):
    client.force_login(world.admin)
    url = reverse("catalog-environment-edit", args=["prod"])
    page = client.get(url)
    form = page.context["form"]
    data = {name: value for name, value in form.initial.items() if name in form.fields}
    data = {k: v for k, v in data.items() if v not in (False, None)}
    data.update(changes)
    return client.post(url, {k: v for k, v in data.items() if v is not False})


def test_environment_form__protection_off_without_reason__409_says_break_glass_nothing_saved(
    client, world
):
    response = edit_form(client, world, protected=False)

    assert response.status_code == 409
    html = response.content.decode()
    assert "break-glass reason" in html
    assert "marked unreviewed" in html
    assert Environment.objects.get(key="prod").protected is True


def test_environment_form__with_reason__saved_banner_on_the_form_and_the_releases_page(
    client, world
):
    response = edit_form(
        client, world, protected=False, break_glass_reason="INC-1: approver on leave"
    )

    assert response.status_code == 302
    page = client.get(reverse("catalog-environment-edit", args=["prod"])).content.decode()
    assert 'id="break-glass-prod"' in page
    assert "INC-1: approver on leave" in page
    releases = client.get(reverse("release-overview")).content.decode()
    assert 'id="break-glass-prod"' in releases


def test_schema__documents_break_glass_fields_and_refusals(db):
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    patch = schema["paths"]["/api/v1/environments/{environment}/"]["patch"]
    assert "break_glass_required" in patch["responses"]["409"]["description"]
    assert (
        "break_glass_reason" in components["PatchedEnvironmentUpdateRequestRequest"]["properties"]
    )
    assert "break_glass" in components["Environment"]["properties"]
    assert "unreviewed" in components["Release"]["properties"]
    assert "unreviewed" in components["ReleaseEvent"]["properties"]
    rollback = schema["paths"][
        "/api/v1/agents/{agent}/documents/{document}/releases/{environment}/rollback/"
    ]["post"]
    assert "unreviewed_version" in rollback["responses"]["409"]["description"]


def test_version_page__went_live_unreviewed__says_so(client, world):
    break_glass(client, world)
    send(client, "post", f"{DOC}/prod/", {"version": 2, "reason": "hotfix"}, world.admin)

    page = client.get(
        reverse("version-detail", args=["assistant_professional", "after_sales_consultation", 2])
    ).content.decode()

    assert 'id="unreviewed-version"' in page
    assert "went live unreviewed in prod" in page
    other = client.get(
        reverse("version-detail", args=["assistant_professional", "after_sales_consultation", 1])
    ).content.decode()
    assert 'id="unreviewed-version"' not in other

"""Webhook events with their context (docs/runtime-contract.md §4): `release.changed` names
who made the change and the approval it came from; `approval.requested` goes only to the
webhooks that asked for it. Delivered by a real Celery worker to a local receiver."""

from __future__ import annotations

import json

import pytest

from strategies.delivery.models import Webhook, WebhookDelivery
from strategies.delivery.webhooks import webhook_create
from strategies.releases.models import Release
from strategies.releases.services import approval_approve, release_publish, release_rollback
from tests.factories import release_setup
from tests.integration.test_webhooks_delivery import Receiver, wait_for_outcome

PUBLIC_URL = "https://console.bank.example"


@pytest.fixture
def worker_environment(monkeypatch, settings):
    """Read by the worker process when it starts: fast retries, loopback receivers."""
    monkeypatch.setenv("WEBHOOK_RETRY_BASE_SECONDS", "0.2")
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    settings.CONSOLE_PUBLIC_URL = PUBLIC_URL


@pytest.fixture
def worker(worker_environment, celery_worker_process, settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_worker_process
    return celery_worker_process


@pytest.fixture
def receivers():
    chat, runtime = Receiver([200]), Receiver([200])
    yield chat, runtime
    chat.close()
    runtime.close()


def hooks_for(world, env_key, chat, runtime):
    """A chat webhook hearing both events and a runtime webhook with the default events."""
    env = world.envs[env_key]
    chat_hook, _ = webhook_create(environment=env, url=chat.url, actor=world.admin)
    Webhook.objects.filter(pk=chat_hook.pk).update(events=["release.changed", "approval.requested"])
    runtime_hook, _ = webhook_create(environment=env, url=runtime.url, actor=world.admin)
    return chat_hook, runtime_hook


def delivered(hook, event):
    delivery = wait_for_outcome({"webhook": hook, "event": event})
    assert delivery.status == WebhookDelivery.Status.DELIVERED
    return json.loads(delivery.body_text)


def test_protected_publish__approval_requested_to_chat_only__then_change_names_approval(
    worker, receivers
):
    world = release_setup()
    chat, runtime = receivers
    chat_hook, runtime_hook = hooks_for(world, "prod", chat, runtime)

    approval = release_publish(
        version=world.strategy[2], environment=world.envs["prod"], actor=world.ops, reason="go"
    ).approval
    requested = delivered(chat_hook, "approval.requested")

    assert requested == {
        "event": "approval.requested",
        "agent": "assistant_professional",
        "environment": "prod",
        "document": "after_sales_consultation",
        "kind": "publish",
        "version": 2,
        "requested_by": "ops",
        "reason": "go",
        "approval_id": approval.pk,
        "url": f"{PUBLIC_URL}/releases/assistant_professional/approvals/{approval.pk}/",
        "occurred_at": requested["occurred_at"],
    }
    headers, _ = chat.calls[0]
    assert headers["webhook-id"]  # signed after Standard Webhooks, the event named in the body
    assert not WebhookDelivery.objects.filter(webhook=runtime_hook).exists()  # not asked for

    approval_approve(approval=approval, actor=world.ops2, note="checked")
    changed = delivered(runtime_hook, "release.changed")

    assert (changed["action"], changed["to_version"]) == ("approve", 2)
    assert changed["actor"] == {"type": "user", "name": "ops2", "token": None}
    assert changed["approval"] == {"id": approval.pk, "requester": "ops", "approver": "ops2"}
    assert delivered(chat_hook, "release.changed") == changed
    assert [json.loads(body)["event"] for _, body in runtime.calls] == ["release.changed"]


def test_direct_publish_and_rollback_request__actor_named_no_approval(worker, receivers):
    world = release_setup()
    chat, runtime = receivers
    chat_hook, runtime_hook = hooks_for(world, "sg-test", chat, runtime)
    sg = world.envs["sg-test"]
    release_publish(version=world.strategy[1], environment=sg, actor=world.ops)
    release_publish(version=world.strategy[2], environment=sg, actor=world.ops)
    sg.rollback_needs_approval = True
    sg.save()

    release = Release.objects.get(environment=sg, document=world.strategy[1].document)
    approval = release_rollback(
        release=release, to_version=world.strategy[1], actor=world.admin, reason="v2 regressed"
    ).approval
    requested = delivered(chat_hook, "approval.requested")
    first = json.loads(
        WebhookDelivery.objects.filter(webhook=runtime_hook).order_by("id").first().body_text
    )

    assert first["actor"] == {"type": "user", "name": "ops", "token": None}
    assert first["approval"] is None
    assert (requested["kind"], requested["version"], requested["approval_id"]) == (
        "rollback",
        1,
        approval.pk,
    )
    assert requested["requested_by"] == "admin"

"""What a silence held back is delivered when it ends (docs/alerts.md, Silences): demo traffic
through the real ingest, the evaluator driven minute by minute, the signed webhooks POSTed to
a local receiver. Alertmanager's behaviour for an alert still firing: sent once at the next
evaluation after the silence ends; a fire and resolve both under the silence: nothing; a
resolve under the silence of an alert sent before it: `alert.resolved` once it ends."""

from __future__ import annotations

import json

import pytest

from strategies.delivery import webhooks
from strategies.delivery.models import WebhookDelivery
from tests.integration.test_alerts import Demo
from tests.integration.test_webhooks_delivery import Receiver, standard_webhooks_valid
from traces.alerts import services
from traces.alerts.models import Alert

pytestmark = pytest.mark.django_db


class Heard:
    """A receiver of alert.fired / alert.resolved in sg-test; `deliver()` makes each pending
    try (what the worker does) and returns the bodies the receiver got since the last call."""

    def __init__(self, demo: Demo):
        self.receiver = Receiver([200])
        self.hook, self.secret = webhooks.webhook_create(
            environment=demo.sg,
            url=self.receiver.url,
            events=["alert.fired", "alert.resolved"],
            actor=demo.world.admin,
        )
        self.seen = 0

    def deliver(self) -> list[dict]:
        for delivery in WebhookDelivery.objects.filter(webhook=self.hook, status="pending"):
            webhooks.delivery_try(delivery_id=delivery.pk)
        calls = self.receiver.calls[self.seen :]
        self.seen = len(self.receiver.calls)
        assert all(standard_webhooks_valid(self.secret, h, b) for h, b in calls)
        return [json.loads(body) for _, body in calls]


@pytest.fixture
def demo(client, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    return Demo(client)


@pytest.fixture
def heard(demo):
    heard = Heard(demo)
    yield heard
    heard.receiver.close()


def silence(demo, rule, *, until_minute: int, at_minute: int = 0):
    return services.silence_create(
        agent=demo.agent,
        values={
            "rule": rule.pk,
            "reason": "order service maintenance",
            "ends_at": demo.at(until_minute),
        },
        actor=demo.world.admin,
        now=demo.at(at_minute),
    )


def test_fired_under_a_silence__sent_once_at_the_next_tick_after_it_is_lifted(demo, heard):
    rule = demo.rule(warning_threshold=None, window_minutes=2)
    quiet = silence(demo, rule, until_minute=60)
    # Given the order provider failing under the silence: the alert fires, nothing is sent
    demo.minute(0, order_fails=True)
    demo.evaluate(0)
    demo.minute(1, order_fails=True)
    demo.evaluate(1)
    alert = Alert.objects.get(rule=rule)
    assert alert.silenced and alert.held and alert.notified_level == ""
    assert heard.deliver() == []
    # The on-call sees it held, on the page and in the API
    demo.client.force_login(demo.world.admin)
    page = demo.client.get("/agents/assistant_professional/alerts/").content.decode()
    assert f'id="alert-{alert.pk}"' in page and "held until the silence ends" in page
    (listed,) = demo.client.get("/api/v1/agents/assistant_professional/alerts").json()
    assert (listed["held"], listed["notified_level"]) == (True, "")
    # When the silence is lifted while it still fires: the next tick sends it, once
    services.silence_lift(silence=quiet, actor=demo.world.admin, now=demo.at(2))
    demo.minute(2, order_fails=True)
    tick = demo.evaluate(2)
    assert tick.fired == [] and len(tick.deliveries) == 1
    bodies = heard.deliver()
    assert [(b["event"], b["level"], b["alert"]) for b in bodies] == [
        ("alert.fired", "alert", alert.pk)
    ]
    assert bodies[0]["request_ids"] == alert.request_ids and bodies[0]["request_ids"]
    alert.refresh_from_db()
    assert not alert.held and alert.notified_level == "alert"
    page = demo.client.get("/agents/assistant_professional/alerts/").content.decode()
    assert "held until the silence ends" not in page
    # Then the following ticks send nothing more while it keeps firing
    for m in (3, 4, 5):
        demo.minute(m, order_fails=True)
        assert demo.evaluate(m).deliveries == []
    assert heard.deliver() == []
    # And its resolve is sent like any other
    for m in (6, 7):
        demo.minute(m, order_fails=False)
        demo.evaluate(m)
    assert [b["event"] for b in heard.deliver()] == ["alert.resolved"]


def test_silence_expires_while_firing__sent_at_the_first_tick_after_its_end(demo, heard):
    rule = demo.rule(warning_threshold=None, window_minutes=2)
    silence(demo, rule, until_minute=3)
    for m in (0, 1, 2):
        demo.minute(m, order_fails=True)
        demo.evaluate(m)
    assert heard.deliver() == []
    demo.minute(3, order_fails=True)
    demo.evaluate(3)  # at 3 min 30 s: the silence ended at 3 min
    assert [(b["event"], b["level"]) for b in heard.deliver()] == [("alert.fired", "alert")]
    demo.evaluate(4)
    assert heard.deliver() == []


def test_fired_and_resolved_under_a_silence__nothing_sent_ever(demo, heard):
    rule = demo.rule(warning_threshold=None, window_minutes=2)
    silence(demo, rule, until_minute=5)
    demo.minute(0, order_fails=True)
    demo.evaluate(0)
    demo.minute(1, order_fails=False)
    demo.minute(2, order_fails=False)
    assert demo.evaluate(2).resolved
    for m in range(3, 8):  # the silence ends at 5
        demo.minute(m, order_fails=False)
        assert demo.evaluate(m).deliveries == []
    assert heard.deliver() == []
    alert = Alert.objects.get(rule=rule)
    assert alert.resolved_at and not alert.held and alert.notified_level == ""


def test_sent_then_resolved_under_a_silence__resolved_sent_when_the_silence_ends(demo, heard):
    rule = demo.rule(warning_threshold=None, window_minutes=2)
    demo.minute(0, order_fails=True)
    demo.evaluate(0)
    assert [b["event"] for b in heard.deliver()] == ["alert.fired"]
    # Given a silence put on after it was sent, and the rule recovering under it
    silence(demo, rule, until_minute=6, at_minute=1)
    demo.minute(1, order_fails=False)
    demo.minute(2, order_fails=False)
    assert demo.evaluate(2).resolved
    assert heard.deliver() == []  # held while the silence lasts
    demo.evaluate(4)
    assert heard.deliver() == []
    # When the silence ends: the receiver that was told it fired hears it resolved, once
    demo.evaluate(6)
    bodies = heard.deliver()
    assert [(b["event"], b["level"]) for b in bodies] == [("alert.resolved", "ok")]
    assert bodies[0]["resolved_at"]
    demo.evaluate(7)
    assert heard.deliver() == []


def test_sent_at_warning_raised_under_a_silence__the_higher_level_sent_when_it_ends(demo, heard):
    rule = demo.rule(warning_threshold=0.1, alert_threshold=0.6, window_minutes=2)
    demo.minute(0, order_fails=True, count=10)
    demo.minute(0, order_fails=False, count=20)
    demo.evaluate(0)
    assert [(b["event"], b["level"]) for b in heard.deliver()] == [("alert.fired", "warning")]
    quiet = silence(demo, rule, until_minute=30, at_minute=0)
    demo.minute(1, order_fails=True)
    demo.minute(2, order_fails=True)
    demo.evaluate(2)
    assert Alert.objects.get(rule=rule).current_level == "alert"
    assert heard.deliver() == []
    services.silence_lift(silence=quiet, actor=demo.world.admin, now=demo.at(3))
    demo.evaluate(3)
    assert [(b["event"], b["level"]) for b in heard.deliver()] == [("alert.fired", "alert")]

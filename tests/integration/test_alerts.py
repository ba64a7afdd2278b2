"""Standing alerts on context health (issue 35 item 4, traces.alerts): demo traffic through
the real ingest, the evaluator driven minute by minute (`alerts_evaluate(now=…)`), alerts
fired, raised, resolved and kept as history, no data, silences, and the signed webhook
delivered to a local receiver."""

from __future__ import annotations

import json
import random
import time
from datetime import timedelta

import msgspec
import pytest
from context_runtime.client import ConfigSnapshot
from django.utils import timezone

from console.demo import traffic
from console.kernel.models import AuditRecord
from strategies.delivery import webhooks
from strategies.delivery.models import WebhookDelivery
from tests.factories import post_batch, runtime_token
from tests.factories.releases import release_setup_serving
from tests.factories.sdk_traffic import runtime_config
from tests.integration.test_webhooks_delivery import Receiver, standard_webhooks_valid
from traces.alerts import services
from traces.alerts.models import Alert, AlertRule

pytestmark = pytest.mark.django_db

PER_MINUTE = 30
# The demo's scenarios where the order service answers, and the one where it times out.
HEALTHY = (traffic.CONSULTATION, traffic.POLICY_TOO_LARGE, traffic.POLICY_CONFLICT)


class Demo:
    """sg-test serving the demo strategy; traffic of the demo's requests, one batch a minute
    from `start` on, the order provider failing or not."""

    def __init__(self, client):
        self.world = release_setup_serving()
        self.sg = self.world.sg
        self.agent = self.world.agent
        self.client = client
        self.secret = runtime_token(self.sg)
        self.config = ConfigSnapshot.from_payload(runtime_config(client, self.secret))
        self.start = (timezone.now() - timedelta(minutes=50)).replace(second=0, microsecond=0)
        self.rng = random.Random(35)
        self.sent = 0

    def at(self, minute: int):
        return self.start + timedelta(minutes=minute)

    def minute(self, minute: int, *, order_fails: bool, count: int = PER_MINUTE) -> None:
        traces = []
        for _ in range(count):
            scenario = traffic.ORDER_TIMEOUT if order_fails else self.rng.choice(HEALTHY)
            traces.append(
                traffic.run(
                    scenario,
                    config=self.config,
                    request_id=f"al-{self.sent}",
                    occurred_at=self.at(minute) + timedelta(seconds=self.rng.randint(0, 59)),
                )
            )
            self.sent += 1
        body = msgspec.json.encode({"traces": traces})
        response = post_batch(self.client, self.secret, body=body)
        assert response.status_code in (200, 202) and response.json()["rejected"] == []

    def evaluate(self, minute: int, seconds: int = 30) -> services.Tick:
        return services.alerts_evaluate(now=self.at(minute) + timedelta(seconds=seconds))

    def rule(self, **changes) -> AlertRule:
        values = {
            "name": "Orders missing",
            "metric": "missing_required_data",
            "comparison": "above",
            "warning_threshold": 0.1,
            "alert_threshold": 0.2,
            "window_minutes": 10,
            "min_traffic": 20,
            **changes,
        }
        return services.rule_create(
            agent=self.agent, environment="sg-test", values=values, actor=self.world.admin
        )


@pytest.fixture
def demo(client):
    return Demo(client)


def test_alert__order_provider_fails__fires_within_two_periods_resolves_then_no_data(demo):
    rule = demo.rule(no_data_minutes=5)
    # Given ten healthy minutes: the rule is ok
    for m in range(10):
        demo.minute(m, order_fails=False)
        assert demo.evaluate(m).fired == []
    assert AlertRule.objects.get(pk=rule.pk).level == "ok"

    # When the order provider fails: the window's rate crosses 10 % (warning) after the
    # first failing minute and 20 % (alert) after the third
    crossed = {}
    for m in range(10, 16):
        demo.minute(m, order_fails=True)
        demo.evaluate(m)
        rate = (m - 9) / 10
        if rate > 0.1:
            crossed.setdefault("warning_at", m)
        if rate > 0.2:
            crossed.setdefault("alert_at", m)
        alert = Alert.objects.filter(rule=rule).first()
        if m >= crossed.get("warning_at", 99) + 1:
            assert alert is not None, f"no alert two periods after the crossing (minute {m})"
    alert = Alert.objects.get(rule=rule)
    # Then it fired as a warning, rose to alert, with request ids of failing requests
    assert alert.level == "alert" and alert.current_level == "alert"
    assert [c["level"] for c in alert.changes] == ["warning", "alert"]
    fired_minute = (alert.fired_at - demo.start) // timedelta(minutes=1)
    assert fired_minute <= crossed["warning_at"] + 1
    assert alert.request_ids and all(r.startswith("al-") for r in alert.request_ids)
    assert alert.document == traffic.STRATEGY
    assert AlertRule.objects.get(pk=rule.pk).level == "alert"

    # When the provider recovers: resolved once the window is healthy again
    for m in range(16, 30):
        demo.minute(m, order_fails=False)
        demo.evaluate(m)
    alert.refresh_from_db()
    assert alert.resolved_at is not None and alert.changes[-1]["level"] == "ok"
    resolved_minute = (alert.resolved_at - demo.start) // timedelta(minutes=1)
    assert resolved_minute <= 15 + 10  # the last failing minute has left the 10-minute window

    # When traffic stops: a no-data alert after 5 quiet minutes, kept beside the first
    for m in range(30, 37):
        demo.evaluate(m)
    no_data = Alert.objects.filter(rule=rule, resolved_at=None).get()
    assert no_data.level == "no_data" and no_data.request_ids == []
    assert (no_data.fired_at - demo.start) // timedelta(minutes=1) == 29 + 5
    assert Alert.objects.filter(rule=rule).count() == 2  # history kept


def test_alert__too_little_traffic__not_judged_and_nothing_fires(demo):
    rule = demo.rule(min_traffic=100)
    for m in range(3):
        demo.minute(m, order_fails=True, count=10)
        demo.evaluate(m)
    assert not Alert.objects.exists()
    assert AlertRule.objects.get(pk=rule.pk).level == "unknown"


def test_alert__webhook__fired_and_resolved_signed_to_a_local_receiver(demo, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    receiver = Receiver([200])
    try:
        hook, secret = webhooks.webhook_create(
            environment=demo.sg,
            url=receiver.url,
            events=["alert.fired", "alert.resolved"],
            actor=demo.world.admin,
        )
        demo.rule(warning_threshold=None, window_minutes=2)
        demo.minute(0, order_fails=True)
        tick = demo.evaluate(0)
        assert tick.fired and tick.deliveries
        demo.minute(1, order_fails=False)
        demo.minute(2, order_fails=False)
        assert demo.evaluate(2).resolved
        deliveries = list(WebhookDelivery.objects.filter(webhook=hook).order_by("pk"))
        assert [d.event for d in deliveries] == ["alert.fired", "alert.resolved"]
        for delivery in deliveries:
            webhooks.delivery_try(delivery_id=delivery.pk)
    finally:
        receiver.close()
    assert len(receiver.calls) == 2
    (h1, fired), (_, resolved) = receiver.calls
    assert standard_webhooks_valid(secret, h1, fired)
    body = json.loads(fired)
    assert body["event"] == "alert.fired" and body["level"] == "alert"
    assert body["rule"]["metric"] == "missing_required_data" and body["value"] == 1.0
    assert body["threshold"] == 0.2 and body["window"]["minutes"] == 2
    assert body["request_ids"] and body["links"]["requests"][0].endswith(
        f"/traces/{body['request_ids'][0]}/"
    )
    assert "/health/sg-test/after_sales_consultation/" in body["links"]["health"]
    assert "status=missing_required_data" in body["links"]["traces"]
    assert json.loads(resolved)["event"] == "alert.resolved"
    assert "Orders missing: alert" in deliveries[0].summary


def test_alert__silenced__recorded_as_silenced_but_not_delivered(demo, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    hook, _ = webhooks.webhook_create(
        environment=demo.sg,
        url="http://127.0.0.1:9/hook",
        events=["alert.fired", "alert.resolved"],
        actor=demo.world.admin,
    )
    rule = demo.rule(warning_threshold=None, window_minutes=2)
    services.silence_create(
        agent=demo.agent,
        values={"rule": rule.pk, "reason": "order service maintenance", "ends_at": demo.at(60)},
        actor=demo.world.admin,
        now=demo.at(0),
    )
    demo.minute(0, order_fails=True)
    demo.evaluate(0)
    alert = Alert.objects.get(rule=rule)
    assert alert.silenced
    assert not WebhookDelivery.objects.filter(webhook=hook).exists()
    assert AuditRecord.objects.filter(action="alert_silence.create").count() == 1


def test_alert__baseline__above_its_7_day_baseline_by_the_share__alert(demo):
    rule = demo.rule(
        name="Worse than last week",
        baseline=True,
        warning_threshold=None,
        alert_threshold=0.5,  # 50 % over the baseline's rate
        window_minutes=1,
    )
    assert demo.evaluate(0).fired == []  # no baseline yet: not judged
    assert AlertRule.objects.get(pk=rule.pk).level == "unknown"
    # Given yesterday: 1 request in 10 with the order service timing out
    demo.minute(-24 * 60, order_fails=False, count=90)
    demo.minute(-24 * 60, order_fails=True, count=10)
    # When today's minute has the same share: ok; then all of them: alert
    demo.minute(1, order_fails=False, count=27)
    demo.minute(1, order_fails=True, count=3)
    assert demo.evaluate(1).fired == []
    assert AlertRule.objects.get(pk=rule.pk).level == "ok"
    demo.minute(2, order_fails=True, count=30)
    assert demo.evaluate(2).fired
    alert = Alert.objects.get(rule=rule)
    assert alert.baseline == pytest.approx(0.1) and alert.threshold == pytest.approx(0.15)


def test_rule_update__stale_revision__409_and_nothing_changed(demo):
    from console.kernel.errors import Conflict

    rule = demo.rule()
    services.rule_update(
        rule=rule, values={"alert_threshold": 0.3}, actor=demo.world.admin, revision=1
    )
    with pytest.raises(Conflict):
        services.rule_update(
            rule=rule, values={"alert_threshold": 0.4}, actor=demo.world.admin, revision=1
        )
    rule.refresh_from_db()
    assert rule.alert_threshold == 0.3 and rule.revision == 2
    assert AuditRecord.objects.filter(action="alert_rule.update").count() == 1


def test_rule_update__switched_off__open_alert_resolved(demo):
    rule = demo.rule(warning_threshold=None, window_minutes=2)
    demo.minute(0, order_fails=True)
    demo.evaluate(0)
    services.rule_update(rule=rule, values={"enabled": False}, actor=demo.world.admin)
    alert = Alert.objects.get(rule=rule)
    assert alert.resolved_at is not None and "switched off" in alert.resolved_because


@pytest.mark.django_db(transaction=True)
def test_alert__real_worker_and_beat__fires_and_delivers_signed(client, settings, tmp_path):
    # Given a receiver hearing alert.fired in sg-test, and a rule on missing required data
    from tests.conftest import celery_worker

    demo = Demo(client)
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    receiver = Receiver([200])
    try:
        _, secret = webhooks.webhook_create(
            environment=demo.sg, url=receiver.url, events=["alert.fired"], actor=demo.world.admin
        )
        demo.rule(warning_threshold=None, window_minutes=2)
        # When the order provider fails now, with the beat judging every 2 s
        demo.minute(50, order_fails=True)
        with celery_worker(
            beat_schedule=tmp_path / "beat",
            ALERT_EVALUATION_SECONDS="2",
            WEBHOOK_ALLOW_PRIVATE_TARGETS="true",
            CACHE_PREFIX=settings.CACHES["default"]["KEY_PREFIX"],
        ) as queue:
            settings.CELERY_TASK_DEFAULT_QUEUE = queue
            deadline = time.monotonic() + 90
            while not receiver.calls and time.monotonic() < deadline:
                time.sleep(0.5)
    finally:
        receiver.close()
    # Then the alert is recorded and its signed webhook delivered by the worker
    assert receiver.calls, "no alert.fired delivered within 90 s"
    headers, body = receiver.calls[0]
    assert standard_webhooks_valid(secret, headers, body)
    assert json.loads(body)["event"] == "alert.fired"
    assert Alert.objects.filter(resolved_at=None, level="alert").count() == 1


def test_demo_traffic__order_service_down__every_request_misses_required_data(demo):
    from console.management.commands.demo_traffic import simulate_request

    rng = random.Random(1)
    statuses = {
        simulate_request(
            demo.config, environment="sg-test", n=n, rng=rng, order_service_down=True
        ).status
        for n in range(20)
    }
    assert statuses == {"missing_required_data"}


@pytest.mark.parametrize("request_id", ["req-94", "a b/c?d#e%f", "ünï", "x:y@z~"])
def test_alert_links__request_path__as_reverse_makes_it(request_id):
    from django.urls import reverse

    assert services._trace_path(request_id) == reverse(
        "trace-detail", kwargs={"request_id": request_id}
    )


def test_counter_window__running_sums__the_same_as_adding_every_minute_of_it():
    from datetime import UTC, datetime

    from traces.alerts import rules
    from traces.alerts.selectors import Minutes

    rng = random.Random(35)
    until = datetime(2026, 12, 7, 4, 0, tzinfo=UTC)
    for _ in range(50):
        by_minute = {
            until - timedelta(minutes=i): {c: rng.randint(0, 50) for c in rules.COLUMNS}
            for i in rng.sample(range(120), rng.randint(0, 60))
        }
        counts = Minutes(by_minute=by_minute)
        for minutes in (1, 2, 10, 60, 200):
            for end in (until, until - timedelta(minutes=3)):
                start = end - timedelta(minutes=minutes - 1)
                inside = [row for m, row in by_minute.items() if start <= m <= end]
                expected = {c: sum(row[c] for row in inside) for c in rules.COLUMNS}
                assert counts.window(end, minutes) == expected

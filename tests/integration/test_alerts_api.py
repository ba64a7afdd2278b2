"""The alerts API and pages (traces.alerts): rules created and changed, bad input refused at
its field with nothing saved, who may read and who may change, silences, the history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from console.kernel.models import AuditRecord
from tests.factories.releases import release_setup
from traces.alerts import services
from traces.alerts.models import AlertRule, Silence

pytestmark = pytest.mark.django_db

RULES = "/api/v1/agents/assistant_professional/alert-rules"
PAGE = "/agents/assistant_professional/alerts/"
GOOD = {
    "environment": "sg-test",
    "name": "Orders missing",
    "metric": "missing_required_data",
    "comparison": "above",
    "warning_threshold": 0.01,
    "alert_threshold": 0.02,
    "window_minutes": 10,
    "no_data_minutes": 10,
}


@pytest.fixture
def w():
    return release_setup()


def fields_of(response) -> dict[str, str]:
    return {d["path"]: d["code"] for d in response.json()["error"]["details"]}


def test_api_rule_create__good__201_audited_and_listed(client, w):
    client.force_login(w.admin)
    response = client.post(RULES, GOOD, content_type="application/json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["alert_threshold"] == 0.02 and body["level"] == "unknown" and body["revision"] == 1
    assert AuditRecord.objects.filter(action="alert_rule.create").count() == 1
    assert [r["name"] for r in client.get(RULES).json()] == ["Orders missing"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"alert_threshold": 2}, "alert_threshold"),
        ({"alert_threshold": -0.5}, "alert_threshold"),
        ({"warning_threshold": 0.05}, "warning_threshold"),
        ({"window_minutes": 0}, "window_minutes"),
        ({"metric": "happiness"}, "metric"),
        ({"alert_threshold": "lots"}, "alert_threshold"),
        ({"environment": "mars"}, "environment"),
        ({"thresold": 1}, "thresold"),
    ],
)
def test_api_rule_create__bad_input__400_at_the_field_nothing_saved(client, w, changes, field):
    client.force_login(w.admin)
    response = client.post(RULES, {**GOOD, **changes}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in fields_of(response), response.json()
    assert not AlertRule.objects.exists()
    assert not AuditRecord.objects.filter(action="alert_rule.create").exists()


def test_api_rule__operator_without_rollback__reads_but_may_not_write(client, w):
    services.rule_create(
        agent=w.agent,
        environment="sg-test",
        values={k: v for k, v in GOOD.items() if k != "environment"},
        actor=w.admin,
    )
    client.force_login(w.ops)
    assert client.get(RULES).status_code == 200
    assert (
        client.post(RULES, {**GOOD, "name": "x"}, content_type="application/json").status_code
        == 403
    )
    assert AlertRule.objects.count() == 1


def test_api_rule_update__stale_revision__409_with_current(client, w):
    client.force_login(w.admin)
    rule = client.post(RULES, GOOD, content_type="application/json").json()
    url = f"{RULES}/{rule['id']}"
    ok = client.patch(
        url, {"alert_threshold": 0.05, "revision": 1}, content_type="application/json"
    )
    assert ok.status_code == 200 and ok.json()["revision"] == 2
    stale = client.patch(
        url, {"alert_threshold": 0.5, "revision": 1}, content_type="application/json"
    )
    assert stale.status_code == 409
    assert AlertRule.objects.get().alert_threshold == 0.05


def test_api_silence__reason_and_future_end_required__then_created_and_lifted(client, w):
    client.force_login(w.admin)
    url = "/api/v1/agents/assistant_professional/alert-silences"
    past = (timezone.now() - timedelta(minutes=1)).isoformat()
    response = client.post(url, {"reason": " ", "ends_at": past}, content_type="application/json")
    assert response.status_code == 400 and {"reason", "ends_at"} <= set(fields_of(response))
    assert not Silence.objects.exists()
    future = (timezone.now() + timedelta(hours=2)).isoformat()
    response = client.post(
        url, {"reason": "maintenance", "ends_at": future, "environment": "sg-test"},
        content_type="application/json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    assert client.delete(f"{url}/{response.json()['id']}").status_code == 204
    assert Silence.objects.get().lifted_at is not None
    assert AuditRecord.objects.filter(action__startswith="alert_silence.").count() == 2


def test_page_rule_form__threshold_out_of_range__error_at_the_field_values_kept(client, w):
    client.force_login(w.admin)
    form = {
        "environment": "sg-test",
        "name": "Orders missing",
        "metric": "missing_required_data",
        "comparison": "above",
        "warning_threshold": "1",
        "alert_threshold": "250",
        "window_minutes": "10",
        "min_traffic": "20",
        "enabled": "on",
    }
    response = client.post(PAGE, form)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'data-path="alert_threshold"' in html and "100 %" in html
    assert 'value="250"' in html and 'value="Orders missing"' in html
    assert not AlertRule.objects.exists()
    # In percent on the form, as fractions in the rule
    response = client.post(PAGE, {**form, "alert_threshold": "2"})
    assert response.status_code == 302
    assert AlertRule.objects.get().alert_threshold == pytest.approx(0.02)


def test_page__support_reads_without_the_forms_working(client, w):
    from tests.factories.users import user_with_grants

    support = user_with_grants("sup", support=w.agent)
    client.force_login(support)
    response = client.get(PAGE)
    assert response.status_code == 200
    assert "needs “Roll back”" in response.content.decode()
    assert client.post(PAGE, {"name": "x"}).status_code == 403

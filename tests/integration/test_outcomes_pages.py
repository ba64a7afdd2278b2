"""The outcome kinds page of an environment (admins declare, change, retire) and the trace
page's Outcomes card."""

from __future__ import annotations

import pytest

from console.kernel.models import AccessLogEntry, AuditRecord
from tests.factories import post_batch, runtime_token, trace_payload, user_with_grants, world
from tests.factories.outcomes import outcome_kinds, post_outcomes
from traces.outcomes.models import OutcomeKind

pytestmark = pytest.mark.django_db

KINDS_URL = "/catalog/environments/sg-test/outcomes/"


@pytest.fixture
def env():
    return world()


@pytest.fixture
def admin(client, env):
    user = user_with_grants(admin=None)
    client.force_login(user)
    return user


def test_kinds_page__empty__says_what_an_outcome_is_and_how_to_start(client, admin):
    response = client.get(KINDS_URL)
    assert response.status_code == 200
    assert b"No outcome kinds yet" in response.content
    assert b"every outcome reported for this environment is refused" in response.content


def test_kinds_page__admin_declares_a_rating__listed_and_audited(client, admin):
    response = client.post(
        KINDS_URL,
        {
            "key": "rating",
            "type": "rating",
            "label": "User's rating",
            "rating_min": "1",
            "rating_max": "5",
            "bad_values": "1, 2",
            "rate_label": "low-rating rate",
        },
    )
    assert response.status_code == 302
    kind = OutcomeKind.objects.get(key="rating")
    assert (kind.rating_min, kind.rating_max, kind.bad_values) == (1, 5, [1, 2])
    page = client.get(KINDS_URL).content.decode()
    assert 'data-kind="rating"' in page and "low-rating rate" in page
    assert AuditRecord.objects.filter(action="outcome_kind.declare").count() == 1


def test_kinds_page__refused_declaration__keeps_what_was_typed_and_says_why(client, admin):
    response = client.post(
        KINDS_URL,
        {"key": "resolution", "type": "label", "label": "Resolution", "choices": "refund, Nope!"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert 'value="refund, Nope!"' in page
    assert "Use lowercase letters, digits" in page
    assert not OutcomeKind.objects.exists()


def test_kinds_page__edit_narrowing_refused_widening_saved__retire_and_restore(client, admin, env):
    outcome_kinds(env["environments"]["sg-test"])
    url = KINDS_URL + "resolution/"
    narrowed = client.post(url, {"label": "Resolution", "choices": "refund, other"})
    assert narrowed.status_code == 400
    assert "Labels may be added, not removed" in narrowed.content.decode()
    saved = client.post(
        url, {"label": "Resolution", "choices": "refund, replacement, explained, other, voucher"}
    )
    assert saved.status_code == 302
    assert OutcomeKind.objects.get(key="resolution").choices[-1] == "voucher"
    client.post(url + "retire", {"retired": "true"})
    assert OutcomeKind.objects.get(key="resolution").retired_at is not None
    client.post(url + "retire", {"retired": "false"})
    assert OutcomeKind.objects.get(key="resolution").retired_at is None
    assert list(
        AuditRecord.objects.filter(target_type="outcome_kind")
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["outcome_kind.update", "outcome_kind.retire", "outcome_kind.restore"]


def test_kinds_page__operator__refused_and_logged(client, env):
    client.force_login(user_with_grants(operator="assistant_professional"))
    assert client.get(KINDS_URL).status_code == 403
    assert client.post(KINDS_URL, {"key": "x", "type": "flag", "label": "X"}).status_code == 403
    assert not OutcomeKind.objects.exists()
    assert AccessLogEntry.objects.filter(action="access.denied").exists()


def test_trace_page__outcomes_card__values_when_and_token__or_how_to_report(client, env):
    sg_test = env["environments"]["sg-test"]
    outcome_kinds(sg_test)
    secret = runtime_token(sg_test)
    post_batch(
        client,
        secret,
        [trace_payload("req-97"), trace_payload("req-92")]
        + [trace_payload(f"req-{n}") for n in range(100, 103)],
    )
    post_outcomes(
        client,
        secret,
        [
            {"request_id": "req-97", "kind": "escalated", "value": True},
            {"request_id": "req-97", "kind": "rating", "value": 1},
        ]
        # three more requests of the same version: one escalated, two not
        + [
            {"request_id": f"req-{n}", "kind": "escalated", "value": n == 100}
            for n in range(100, 103)
        ],
    )
    client.force_login(user_with_grants(support="assistant_professional"))
    page = client.get("/traces/req-97/").content.decode()
    assert 'id="outcomes"' in page
    assert 'data-outcome="escalated"' in page and "Escalated to a person" in page
    assert 'title="Counts towards the escalation rate"' in page
    assert 'data-outcome="rating"' in page and "test sg-test" in page
    # beside it, how often this version's requests here were escalated: 2 of 4
    assert 'data-share="2/4"' in page and "in <strong>2 of 4</strong>" in page
    assert 'title="50.0% of the' in page  # the percentage one hover away
    assert 'data-share="1/1"' in page  # the one rating reported, a 1
    empty = client.get("/traces/req-92/").content.decode()
    assert 'id="outcomes-empty"' in empty
    assert 'reporter.report_outcome("req-92", "escalated", True)' in empty

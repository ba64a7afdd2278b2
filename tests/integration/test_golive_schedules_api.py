"""The API of scheduled go-lives and an environment's calendar: a schedule in the past or in
a freeze is a structured 400 at `run_at` with nothing saved; a good one is 201 and listed;
admins set freezes and change hours, an operator may not; cancel by the requester."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from strategies.releases.models import FreezeWindow, ScheduledGoLive
from tests.factories.releases import rollout_setup

NOON = datetime(2026, 12, 23, 12, 0, tzinfo=UTC)
BASE = "/api/v1/agents/assistant_professional/"
SCHEDULE = BASE + "documents/after_sales_consultation/releases/sg-test/schedule/"
CALENDAR = "/api/v1/environments/sg-test/calendar/"


@pytest.fixture
def world(db, clock):
    clock.set(NOON)
    return rollout_setup()


def post(client, url, body, method="post"):
    return getattr(client, method)(url, body, content_type="application/json")


def test_api_schedule__past_or_frozen__400_at_run_at_nothing_saved(client, world):
    client.force_login(world.admin)
    assert (
        post(
            client,
            CALENDAR + "freezes/",
            {
                "starts_at": (NOON + timedelta(days=1)).isoformat(),
                "ends_at": (NOON + timedelta(days=2)).isoformat(),
                "reason": "Year-end freeze",
            },
        ).status_code
        == 201
    )
    client.force_login(world.ops)

    past = post(client, SCHEDULE, {"version": 3, "run_at": (NOON - timedelta(hours=1)).isoformat()})
    frozen = post(
        client, SCHEDULE, {"version": 3, "run_at": (NOON + timedelta(hours=30)).isoformat()}
    )

    assert past.status_code == 400
    assert past.json()["error"]["code"] == "in_the_past"
    assert past.json()["error"]["details"][0]["path"] == "run_at"
    assert frozen.status_code == 400
    assert frozen.json()["error"]["code"] == "frozen"
    assert "Year-end freeze" in frozen.json()["error"]["message"]
    assert not ScheduledGoLive.objects.exists()


def test_api_schedule__created_listed_cancelled(client, world):
    client.force_login(world.ops)
    made = post(
        client,
        SCHEDULE,
        {"version": 3, "run_at": (NOON + timedelta(hours=2)).isoformat(), "reason": "train 51"},
    )
    assert made.status_code == 201, made.json()
    assert made.json()["state"] == "scheduled"

    listed = client.get(BASE + "schedules/").json()
    assert [row["id"] for row in listed] == [made.json()["id"]]

    cancelled = post(client, BASE + f"schedules/{made.json()['id']}/cancel/", {"reason": "moved"})
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"


def test_api_calendar__operator_may_read_not_change(client, world):
    client.force_login(world.ops)
    assert client.get(CALENDAR).status_code == 200
    refused = post(
        client,
        CALENDAR + "freezes/",
        {
            "starts_at": NOON.isoformat(),
            "ends_at": (NOON + timedelta(hours=1)).isoformat(),
            "reason": "not mine",
        },
    )
    assert refused.status_code == 403
    assert not FreezeWindow.objects.exists()


def test_api_change_hours__set_then_shown_bad_zone_400(client, world):
    client.force_login(world.admin)
    bad = post(
        client,
        CALENDAR + "change-hours/",
        {"days": [0, 1], "opens_at": "09:00", "closes_at": "17:00", "time_zone": "Nowhere/X"},
        method="put",
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["details"][0]["path"] == "time_zone"
    good = post(
        client,
        CALENDAR + "change-hours/",
        {
            "days": [0, 1, 2, 3, 4],
            "opens_at": "09:00",
            "closes_at": "17:00",
            "time_zone": "Europe/London",
        },
        method="put",
    )
    assert good.status_code == 200
    shown = client.get(CALENDAR).json()
    assert shown["change_hours"]["words"] == "Mon–Fri 09:00–17:00 Europe/London"


def test_releases_page__shows_what_is_scheduled_and_the_next_freeze(client, world):
    client.force_login(world.admin)
    post(
        client,
        CALENDAR + "freezes/",
        {
            "starts_at": (NOON + timedelta(days=1)).isoformat(),
            "ends_at": (NOON + timedelta(days=2)).isoformat(),
            "reason": "Year-end freeze",
        },
    )
    client.force_login(world.ops)
    post(client, SCHEDULE, {"version": 3, "run_at": (NOON + timedelta(hours=2)).isoformat()})

    page = client.get("/releases/").content.decode()

    assert "Scheduled go-lives and change windows" in page
    assert "after_sales_consultation v3" in page and "data-schedule=" in page
    assert "Next freeze" in page and "Year-end freeze" in page

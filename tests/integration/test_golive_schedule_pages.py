"""The pages of scheduled go-lives and an environment's calendar (issue 34 item 2): the publish
page's "Schedule for…" (a local time in the environment's zone; past, frozen, outside the
change hours, no right → the reason at the time field, nothing saved), the releases page's
cancel button (the requester or an admin, audited), and the admins' calendar page (freezes,
change hours, freeze break-glass; bad input at its field, nothing saved). Through the same
services as the API; every time is the test's clock (console.kernel.clock)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from console.kernel.audit import AuditAction
from console.kernel.models import AuditRecord
from strategies.releases.models import (
    ChangeHours,
    FreezeBreakGlass,
    FreezeWindow,
    Release,
    ScheduledGoLive,
)
from strategies.releases.services.calendar import change_hours_set, freeze_window_create
from tests.factories import user_with_grants
from tests.factories.releases import rollout_setup

NOON = datetime(2026, 12, 23, 12, 0, tzinfo=UTC)  # a Wednesday
PUBLISH = "/releases/assistant_professional/after_sales_consultation/sg-test/publish/"
CALENDAR = "/catalog/environments/sg-test/calendar/"


@pytest.fixture
def world(db, clock):
    clock.set(NOON)
    return rollout_setup()


def local(moment: datetime) -> str:
    """What a datetime-local input sends."""
    return f"{moment:%Y-%m-%dT%H:%M}"


def schedule(client, run_at: str, **extra):
    body = {"version": "3", "reason": "CHG-1: after the stand-up", "run_at": run_at}
    return client.post(PUBLISH, {**body, "when": "schedule", **extra})


def field_errors(response) -> str:
    page = response.content.decode()
    found = re.search(r'<ul class="errorlist" id="schedule-errors"[^>]*>(.*?)</ul>', page, re.S)
    return found.group(1) if found else ""


def test_publish_page__shows_the_zone_and_the_next_window(client, world):
    change_hours_set(
        environment=world.envs["sg-test"],
        days=[0, 1, 2, 3, 4],
        opens_at="14:00",
        closes_at="17:00",
        time_zone="Asia/Singapore",
        actor=world.admin,
    )
    client.force_login(world.ops)

    page = client.get(PUBLISH).content.decode()

    assert 'id="schedule-run-at"' in page and "Asia/Singapore" in page
    # 12:00 UTC is 20:00 in Singapore: closed; next open Thursday 14:00 local (06:00 UTC).
    assert "Next allowed window in sg-test: Thu 2026-12-24 14:00 Asia/Singapore" in page


def test_publish_page__schedule__saved_in_the_environment_zone_and_audited(client, world):
    change_hours_set(
        environment=world.envs["sg-test"],
        days=[0, 1, 2, 3, 4],
        opens_at="09:00",
        closes_at="17:00",
        time_zone="Europe/London",
        actor=world.admin,
    )
    client.force_login(world.ops)

    response = schedule(client, "2026-12-24T10:30")

    assert response.status_code == 302
    planned = ScheduledGoLive.objects.get()
    assert planned.run_at == datetime(2026, 12, 24, 10, 30, tzinfo=UTC)  # London is UTC then
    assert planned.requested_by == world.ops and planned.version.number == 3
    assert planned.kind == ScheduledGoLive.Kind.PUBLISH
    assert AuditRecord.objects.filter(action=AuditAction.SCHEDULE_CREATE).count() == 1
    live = Release.objects.get(environment__key="sg-test", document__key="after_sales_consultation")
    assert live.version.number == 2  # nothing went live now


@pytest.mark.parametrize(
    "case, run_at, code, words",
    [
        ("past", NOON - timedelta(hours=1), "in_the_past", "That time has passed"),
        ("frozen", NOON + timedelta(hours=30), "frozen", "Year-end freeze"),
        ("closed", NOON + timedelta(hours=9), "outside_change_hours", "takes changes Mon–Fri"),
        ("empty", None, "invalid", "Give a date and time"),
    ],
)
def test_publish_page__bad_time__reason_at_the_field_nothing_saved(
    client, world, case, run_at, code, words
):
    sg = world.envs["sg-test"]
    freeze_window_create(
        environment=sg,
        starts_at=NOON + timedelta(days=1),
        ends_at=NOON + timedelta(days=2),
        reason="Year-end freeze",
        actor=world.admin,
    )
    change_hours_set(
        environment=sg, days=[0, 1, 2, 3, 4], opens_at="08:00", closes_at="18:00", actor=world.admin
    )
    client.force_login(world.ops)

    response = schedule(client, local(run_at) if run_at else "")

    assert response.status_code == 400
    assert f'data-code="{code}"' in response.content.decode()
    assert words in field_errors(response)
    assert "CHG-1: after the stand-up" in response.content.decode()  # what was typed stays
    assert not ScheduledGoLive.objects.exists()


def test_publish_page__schedule_without_the_right__refused_at_the_field_nothing_saved(
    client, world
):
    viewer = user_with_grants("viewer1", viewer=world.agent)
    client.force_login(viewer)

    response = schedule(client, local(NOON + timedelta(hours=1)))

    assert response.status_code == 403
    assert field_errors(response)
    assert not ScheduledGoLive.objects.exists()


def test_publish_page__a_time_typed_then_publish_now__nothing_published(client, world):
    client.force_login(world.ops)

    response = client.post(
        PUBLISH,
        {"version": "3", "reason": "CHG-1", "run_at": local(NOON + timedelta(hours=1))},
    )

    assert response.status_code == 400
    assert "press the Schedule button" in field_errors(response)
    assert not ScheduledGoLive.objects.exists()
    assert not Release.objects.filter(environment__key="sg-test", version__number=3).exists()


def test_releases_page__cancel__by_the_requester_audited__not_by_another_operator(client, world):
    client.force_login(world.ops)
    schedule(client, local(NOON + timedelta(hours=1)))
    planned = ScheduledGoLive.objects.get()
    cancel = f"/releases/assistant_professional/schedules/{planned.pk}/cancel/"

    page = client.get("/releases/").content.decode()
    assert f'id="cancel-schedule-{planned.pk}"' in page
    client.force_login(world.ops2)
    assert f'id="cancel-schedule-{planned.pk}"' not in client.get("/releases/").content.decode()
    refused = client.post(cancel, {"reason": "not mine"})
    assert refused.status_code == 403
    assert ScheduledGoLive.objects.get().state == ScheduledGoLive.State.SCHEDULED

    client.force_login(world.ops)
    done = client.post(cancel, {"reason": "CAB moved it"})

    assert done.status_code == 302
    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.CANCELLED and planned.outcome == "CAB moved it"
    row = AuditRecord.objects.get(action=AuditAction.SCHEDULE_CANCEL)
    assert row.after["state"] == "cancelled"
    assert "data-schedule=" not in client.get("/releases/").content.decode()


def test_releases_page__next_window_links_admins_to_the_calendar(client, world):
    freeze_window_create(
        environment=world.envs["sg-test"],
        starts_at=NOON - timedelta(hours=1),
        ends_at=NOON + timedelta(hours=5),
        reason="Migration weekend",
        actor=world.admin,
    )
    client.force_login(world.admin)
    admin_page = client.get("/releases/").content.decode()
    client.force_login(world.ops)
    ops_page = client.get("/releases/").content.decode()

    assert f'href="{CALENDAR}"' in admin_page and "Next window" in admin_page
    assert f'href="{CALENDAR}"' not in ops_page and "Next window" in ops_page


def test_calendar_page__admin_adds_and_removes_a_freeze__audited(client, world):
    client.force_login(world.admin)

    added = client.post(
        CALENDAR + "freezes/",
        {
            "starts_at": local(NOON + timedelta(days=1)),
            "ends_at": local(NOON + timedelta(days=2)),
            "reason": "Year-end freeze",
        },
    )

    assert added.status_code == 302
    window = FreezeWindow.objects.get()
    assert window.starts_at == NOON + timedelta(days=1) and window.created_by == "admin"
    page = client.get(CALENDAR).content.decode()
    assert "Year-end freeze" in page and f'data-freeze="{window.pk}"' in page
    assert client.post(CALENDAR + f"freezes/{window.pk}/remove/").status_code == 302
    assert not FreezeWindow.objects.exists()
    rows = AuditRecord.objects.filter(action__startswith="freeze_window").order_by("id")
    assert [r.action for r in rows] == [
        AuditAction.FREEZE_WINDOW_CREATE,
        AuditAction.FREEZE_WINDOW_DELETE,
    ]


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"starts_at": "", "ends_at": "2026-12-25T12:00"}, "starts_at", "Give a date and time"),
        (
            {"starts_at": "2026-12-25T12:00", "ends_at": "2026-12-24T12:00"},
            "ends_at",
            "ends after it starts",
        ),
        (
            {"starts_at": "2026-12-20T12:00", "ends_at": "2026-12-21T12:00"},
            "ends_at",
            "already be over",
        ),
        (
            {"starts_at": "2026-12-24T12:00", "ends_at": "2026-12-25T12:00", "reason": ""},
            "reason",
            "Say why",
        ),
    ],
)
def test_calendar_page__bad_freeze__reason_at_its_field_nothing_saved(
    client, world, body, field, words
):
    client.force_login(world.admin)

    response = client.post(CALENDAR + "freezes/", {"reason": "Year-end", **body})

    assert response.status_code == 400
    page = response.content.decode()
    at_field = re.search(rf'data-field="{field}">(.*?)</div>', page, re.S).group(1)
    assert "has-error" in page and words in at_field
    assert not FreezeWindow.objects.exists()


def test_calendar_page__change_hours__set_then_bad_zone_refused_at_its_field(client, world):
    client.force_login(world.admin)

    good = client.post(
        CALENDAR + "hours/",
        {
            "days": ["0", "1", "2"],
            "opens_at": "22:00",
            "closes_at": "02:00",
            "time_zone": "Asia/Singapore",
        },
    )
    bad = client.post(
        CALENDAR + "hours/",
        {"days": ["0"], "opens_at": "09:00", "closes_at": "17:00", "time_zone": "Mars/Olympus"},
    )

    assert good.status_code == 302
    hours = ChangeHours.objects.get()
    assert hours.days == [0, 1, 2] and hours.time_zone == "Asia/Singapore"
    assert bad.status_code == 400
    at_field = re.search(r'data-field="time_zone">(.*?)</div>', bad.content.decode(), re.S)
    assert "is not a time zone" in at_field.group(1)
    assert ChangeHours.objects.get().time_zone == "Asia/Singapore"  # unchanged


def test_calendar_page__break_glass__bounded_minutes_then_started_and_ended(client, world):
    client.force_login(world.admin)  # a sign-in now: recent

    too_long = client.post(
        CALENDAR + "break-glass/", {"reason": "INC-9: hotfix", "minutes": "9999"}
    )
    started = client.post(CALENDAR + "break-glass/", {"reason": "INC-9: hotfix", "minutes": "30"})

    assert too_long.status_code == 400
    assert "lasts 1 to" in re.search(
        r'data-field="minutes">(.*?)</div>', too_long.content.decode(), re.S
    ).group(1)
    assert started.status_code == 302
    glass = FreezeBreakGlass.objects.get()
    assert glass.reason == "INC-9: hotfix" and glass.started_by == "admin"
    assert "Freeze break-glass until" in client.get(CALENDAR).content.decode()
    assert client.post(CALENDAR + "break-glass/end/").status_code == 302
    glass.refresh_from_db()
    assert glass.ended_at is not None


def test_calendar_page__an_operator__forbidden_nothing_saved(client, world):
    client.force_login(world.ops)

    assert client.get(CALENDAR).status_code == 403
    response = client.post(
        CALENDAR + "freezes/",
        {"starts_at": "2026-12-24T12:00", "ends_at": "2026-12-25T12:00", "reason": "mine"},
    )
    assert response.status_code == 403
    assert not FreezeWindow.objects.exists()


def test_catalog__environment_pages_link_to_the_calendar(client, world):
    client.force_login(world.admin)

    assert f'href="{CALENDAR}"' in client.get("/catalog/").content.decode()
    assert (
        f'href="{CALENDAR}"' in client.get("/catalog/environments/sg-test/edit/").content.decode()
    )


def test_rollout_start_page__schedule__saved_with_its_plan_past_refused_at_the_field(client, world):
    client.force_login(world.ops)
    rollout = PUBLISH.replace("/publish/", "/rollout/")
    body = {"version": "3", "plan": "staged", "unit": "principal", "when": "schedule"}

    past = client.post(rollout, {**body, "run_at": local(NOON - timedelta(minutes=5))})
    good = client.post(rollout, {**body, "run_at": local(NOON + timedelta(hours=2))})

    assert past.status_code == 400 and "That time has passed" in field_errors(past)
    assert good.status_code == 302
    planned = ScheduledGoLive.objects.get()
    assert planned.kind == ScheduledGoLive.Kind.ROLLOUT_START
    assert planned.plan == "staged" and planned.unit == "principal"
    assert planned.run_at == NOON + timedelta(hours=2)


def test_releases_page__countdown_reads_the_rules_clock_not_the_wall(client, world):
    """The schedule runs by the rules' clock; its countdown must say the same time is left."""
    client.force_login(world.ops)
    schedule(client, local(NOON + timedelta(hours=3)))

    page = client.get("/releases/").content.decode()

    countdown = re.search(r"<span data-countdown>(.*?)</span>", page).group(1)
    # (the set clock moves on with real time: a second later it is 2 hours, 59 minutes)
    assert countdown.replace("\xa0", " ") in ("in 3 hours", "in 2 hours, 59 minutes")

"""The clock-driven rules of when changes may go live (strategies.releases.selectors.calendar):
freeze edges and chained freezes, change hours across midnight and across the DST changes of
Europe/London, and Asia/Singapore (no DST), on unsaved rows — and the one clock they read."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from console.kernel import clock as kernel_clock
from strategies.releases.models import ChangeHours, FreezeWindow
from strategies.releases.selectors.calendar import (
    freeze_until,
    hours_next_open,
    hours_open_at,
    hours_words,
)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def window(start: str, end: str, reason: str = "release freeze") -> FreezeWindow:
    return FreezeWindow(starts_at=at(start), ends_at=at(end), reason=reason, created_by="admin")


def hours(days, opens: str, closes: str, zone: str) -> ChangeHours:
    return ChangeHours(
        days=list(days),
        opens_at=time.fromisoformat(opens),
        closes_at=time.fromisoformat(closes),
        time_zone=zone,
    )


XMAS = window("2026-12-24T00:00:00+00:00", "2026-12-27T00:00:00+00:00", "Christmas")


@pytest.mark.parametrize(
    ("moment", "frozen"),
    [
        ("2026-12-23T23:59:59+00:00", False),  # a second before it starts
        ("2026-12-24T00:00:00+00:00", True),  # its start is inside
        ("2026-12-26T23:59:59+00:00", True),
        ("2026-12-27T00:00:00+00:00", False),  # its end is outside: it thawed
    ],
)
def test_freeze__edges__start_inside_end_outside(moment, frozen):
    assert (freeze_until([XMAS], at(moment)) is not None) is frozen


def test_freeze__overlapping_and_touching_windows__thaws_when_the_last_ends():
    # Given Christmas, a New Year window overlapping it, and one touching that
    new_year = window("2026-12-26T00:00:00+00:00", "2027-01-02T00:00:00+00:00", "New Year")
    touching = window("2027-01-02T00:00:00+00:00", "2027-01-03T00:00:00+00:00", "Audit")
    later = window("2027-02-01T00:00:00+00:00", "2027-02-02T00:00:00+00:00", "Later")
    # When judged on Christmas Day
    found = freeze_until([XMAS, new_year, touching, later], at("2026-12-25T12:00:00+00:00"))
    # Then it thaws when no window covers the time any more
    assert found[1] == at("2027-01-03T00:00:00+00:00")


WEEKDAYS_LONDON = hours(range(5), "09:00", "17:00", "Europe/London")


@pytest.mark.parametrize(
    ("moment", "open_"),
    [
        # Winter (GMT = UTC): 09:00 local is 09:00 UTC
        ("2026-01-14T08:59:00+00:00", False),
        ("2026-01-14T09:00:00+00:00", True),
        ("2026-01-14T16:59:00+00:00", True),
        ("2026-01-14T17:00:00+00:00", False),
        # Summer (BST = UTC+1): 09:00 local is 08:00 UTC
        ("2026-07-15T08:00:00+00:00", True),
        ("2026-07-15T07:59:00+00:00", False),
        ("2026-07-15T16:00:00+00:00", False),
        # Saturday
        ("2026-07-18T10:00:00+00:00", False),
    ],
)
def test_change_hours__weekdays_in_london__follow_local_time_through_dst(moment, open_):
    assert hours_open_at(WEEKDAYS_LONDON, at(moment)) is open_


def test_change_hours__the_night_the_clocks_go_forward__the_next_morning_opens_at_local_nine():
    # Given London's clocks go forward on Sunday 29 March 2026 at 01:00 UTC
    # When asked late on Saturday 28 March
    opens = hours_next_open(WEEKDAYS_LONDON, at("2026-03-28T23:00:00+00:00"))
    # Then Monday 09:00 BST, which is 08:00 UTC
    assert opens == at("2026-03-30T08:00:00+00:00")


OVERNIGHT_SINGAPORE = hours([5], "22:00", "06:00", "Asia/Singapore")  # Saturday night


@pytest.mark.parametrize(
    ("moment", "open_"),
    [
        ("2026-07-18T21:59:00+08:00", False),  # Saturday, before it opens
        ("2026-07-18T22:00:00+08:00", True),
        ("2026-07-19T05:59:00+08:00", True),  # Sunday morning: still Saturday's window
        ("2026-07-19T06:00:00+08:00", False),
        ("2026-07-19T22:30:00+08:00", False),  # Sunday night has no window
    ],
)
def test_change_hours__across_midnight__belong_to_the_day_they_open(moment, open_):
    assert hours_open_at(OVERNIGHT_SINGAPORE, at(moment)) is open_


def test_change_hours__across_midnight_in_london_when_clocks_go_back__still_close_at_local_six():
    # Given Saturday-night hours in London; the clocks go back at 02:00 BST on 25 October 2026
    saturday_night = hours([5], "22:00", "06:00", "Europe/London")
    # Then 05:30 GMT (05:30 UTC) is inside and 06:00 GMT is not: a 9-hour night
    assert hours_open_at(saturday_night, at("2026-10-25T05:30:00+00:00"))
    assert not hours_open_at(saturday_night, at("2026-10-25T06:00:00+00:00"))
    assert hours_open_at(saturday_night, at("2026-10-24T21:00:00+00:00"))  # 22:00 BST


def test_change_hours__none_or_no_days__any_time():
    assert hours_open_at(None, at("2026-07-18T03:00:00+00:00"))
    assert hours_open_at(hours([], "09:00", "17:00", "UTC"), at("2026-07-18T03:00:00+00:00"))
    assert hours_next_open(None, at("2026-07-18T03:00:00+00:00")) is None


def test_change_hours__words__name_days_times_and_zone():
    assert hours_words(WEEKDAYS_LONDON) == "Mon–Fri 09:00–17:00 Europe/London"
    assert hours_words(OVERNIGHT_SINGAPORE) == "Sat 22:00–06:00 (to the next day) Asia/Singapore"
    assert hours_words(None) == "any time"


def test_clock__set_and_advanced__moves_on_from_the_set_time_then_real_again():
    try:
        kernel_clock.clock_set(at("2030-01-01T00:00:00+00:00"))
        assert abs(kernel_clock.now() - at("2030-01-01T00:00:00+00:00")) < timedelta(seconds=1)
        kernel_clock.clock_advance(timedelta(hours=2))
        assert kernel_clock.now() >= at("2030-01-01T02:00:00+00:00")
        with pytest.raises(ValueError):
            kernel_clock.clock_set(datetime(2030, 1, 1))  # naive: refused
    finally:
        kernel_clock.clock_set(None)
    assert kernel_clock.now().year < 2030

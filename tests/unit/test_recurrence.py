"""Recurrence: cron in a time zone with the DST rules, and intervals (no database)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine

from scheduling.schedules.recurrence import (
    RecurrenceError,
    Rule,
    next_instants,
    to_utc,
    validate_cron,
    zone,
)

NY = ZoneInfo("America/New_York")
LONDON = ZoneInfo("Europe/London")
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)


def cron(expression: str, tz: str = "UTC", **bounds) -> Rule:
    return Rule(cron=expression, every_seconds=None, timezone=tz, anchor=ANCHOR, **bounds)


def local(instants, tz):
    return [i.astimezone(tz).strftime("%m-%d %H:%M %Z") for i in instants]


def test_spring_forward_gap_fires_once_at_the_first_valid_instant() -> None:
    # New York, 2027-03-14: 02:00 EST jumps to 03:00 EDT.
    rule = cron("*/20 * * * *", "America/New_York")
    got = next_instants(rule, datetime(2027, 3, 14, 6, 30, tzinfo=UTC), 5)
    # 02:00, 02:20 and 02:40 do not exist: all three fire once, at 03:00 EDT.
    assert local(got, NY) == [
        "03-14 01:40 EST",
        "03-14 03:00 EDT",
        "03-14 03:20 EDT",
        "03-14 03:40 EDT",
        "03-14 04:00 EDT",
    ]


def test_fall_back_repeated_hour_fires_once_at_the_earlier_instant() -> None:
    # London, 2027-10-31: 02:00 BST goes back to 01:00 GMT; 01:30 happens twice.
    rule = cron("30 1 * * *", "Europe/London")
    got = next_instants(rule, datetime(2027, 10, 30, 12, tzinfo=UTC), 3)
    assert got == [
        datetime(2027, 10, 31, 0, 30, tzinfo=UTC),  # 01:30 BST, the earlier
        datetime(2027, 11, 1, 1, 30, tzinfo=UTC),
        datetime(2027, 11, 2, 1, 30, tzinfo=UTC),
    ]
    hourly = next_instants(
        cron("0 * * * *", "America/New_York"), datetime(2027, 11, 7, 4, tzinfo=UTC), 4
    )
    # 01:00 once (EDT), then 02:00 EST: two real hours apart, never 01:00 EST.
    assert local(hourly, NY) == [
        "11-07 00:00 EDT",
        "11-07 01:00 EDT",
        "11-07 02:00 EST",
        "11-07 03:00 EST",
    ]


@pytest.mark.parametrize(
    ("expression", "tz", "moment", "expected"),
    [
        (
            "30 2 * * *",
            "America/New_York",
            datetime(2027, 3, 14, 7, 0, tzinfo=UTC),
            datetime(2027, 3, 14, 7, 0, tzinfo=UTC),
        ),
        (
            "30 1 * * *",
            "Europe/London",
            datetime(2027, 3, 28, 1, 0, tzinfo=UTC),
            datetime(2027, 3, 28, 1, 0, tzinfo=UTC),
        ),
    ],
)
def test_a_cursor_on_the_transition_keeps_the_skipped_time(
    expression, tz, moment, expected
) -> None:
    # The planner resumes from its cursor; a gap time mapped onto it must not be lost.
    assert next(cron(expression, tz).after(moment)) == expected


def test_to_utc_maps_gap_and_fold() -> None:
    assert to_utc(datetime(2027, 3, 28, 1, 30), LONDON) == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert to_utc(datetime(2027, 11, 7, 1, 30), NY) == datetime(2027, 11, 7, 5, 30, tzinfo=UTC)
    assert to_utc(datetime(2027, 6, 1, 9, 0), NY) == datetime(2027, 6, 1, 13, 0, tzinfo=UTC)


def test_every_seconds_counts_real_seconds_across_dst() -> None:
    rule = Rule(
        cron=None,
        every_seconds=3600,
        timezone="America/New_York",
        anchor=datetime(2027, 3, 14, 5, tzinfo=UTC),
    )
    got = next_instants(rule, datetime(2027, 3, 14, 5, tzinfo=UTC), 4)
    assert [b - a for a, b in itertools.pairwise(got)] == [timedelta(hours=1)] * 3
    assert local(got, NY) == [
        "03-14 00:00 EST",
        "03-14 01:00 EST",
        "03-14 03:00 EDT",
        "03-14 04:00 EDT",
    ]


def test_bounds_and_latest_before() -> None:
    start = datetime(2027, 1, 1, 0, 0, 30, tzinfo=UTC)
    rule = Rule(
        cron=None,
        every_seconds=60,
        timezone="UTC",
        anchor=start,
        start_at=start,
        end_at=start + timedelta(minutes=2),
    )
    assert list(rule.after(start - timedelta(days=1))) == [
        start + timedelta(minutes=m) for m in range(3)
    ]
    assert rule.latest_before(start + timedelta(minutes=1, seconds=1)) == start + timedelta(
        minutes=1
    )
    assert rule.latest_before(start + timedelta(minutes=1)) == start
    assert rule.latest_before(start) is None
    assert rule.latest_before(start + timedelta(days=1)) == start + timedelta(minutes=2)
    daily = cron("0 9 * * *", "Europe/London")
    assert daily.latest_before(datetime(2027, 7, 2, 8, 0, tzinfo=UTC)) == datetime(
        2027, 7, 2, 8, 0, tzinfo=UTC
    ) - timedelta(days=1)


def test_preview_from_a_frozen_clock() -> None:
    with time_machine.travel(datetime(2027, 3, 13, 12, tzinfo=UTC), tick=False):
        now = datetime.now(UTC)
        got = next_instants(cron("30 2 * * *", "America/New_York"), now, 3)
    assert got == [
        datetime(2027, 3, 14, 7, 0, tzinfo=UTC),
        datetime(2027, 3, 15, 6, 30, tzinfo=UTC),
        datetime(2027, 3, 16, 6, 30, tzinfo=UTC),
    ]


@pytest.mark.parametrize(
    "expression", ["61 * * * *", "* * * *", "* * * * * *", "x y z a b", "", "5-0 * * * *"]
)
def test_invalid_cron_names_the_field(expression) -> None:
    with pytest.raises(RecurrenceError) as caught:
        validate_cron(expression)
    assert caught.value.field == "cron"


def test_names_steps_lists_and_ranges_are_accepted() -> None:
    for expression in ("0 9 * * MON-FRI", "*/5 8-18 * JAN,JUL *", "0 0 1,15 * *", "15 14 1 * *"):
        validate_cron(expression)


@pytest.mark.parametrize("name", ["Mars/Olympus", "", " UTC", "../etc/passwd"])
def test_unknown_time_zone_names_the_field(name) -> None:
    with pytest.raises(RecurrenceError) as caught:
        zone(name)
    assert caught.value.field == "timezone"

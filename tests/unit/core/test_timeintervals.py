"""Time windows at run time: Alertmanager's ``ContainsTime`` and the first instant the answer flips.

The vectors marked "Alertmanager" are carried over from prometheus/alertmanager
``timeinterval/timeinterval_test.go`` (``timeIntervalTestCases``, ``yamlUnmarshalTestCases``,
``completeTestCases``, ``TestIntervener_Mutes``; times in Go's RFC822Z layout). ``next_change`` is checked
against the plainest possible reference: ``matches`` called at every minute boundary.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notification_controller.api.timeinterval import TimeInterval
from notification_controller.core.timeintervals import (
    MAX_DAY_KEYS,
    UNION_BUDGET,
    compiled,
    matches,
    next_change,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
SYDNEY = ZoneInfo("Australia/Sydney")


def entry(**fields: Any) -> TimeInterval:
    return TimeInterval.model_validate(fields)


def times(*ranges: str) -> list[dict[str, str]]:
    return [{"startTime": r.split("-")[0], "endTime": r.split("-")[1]} for r in ranges]


def rfc822z(text: str) -> datetime:
    """Go's ``time.RFC822Z`` (``02 Jan 06 15:04 -0700``), as Alertmanager's tests write instants."""
    return datetime.strptime(text, "%d %b %y %H:%M %z")


# ---- Alertmanager: timeIntervalTestCases, yamlUnmarshalTestCases, completeTestCases ----

ALERTMANAGER: list[tuple[str, list[TimeInterval], list[str], list[str]]] = [
    ("empty", [entry()], ["02 Jan 06 15:04 +0000", "03 Jan 07 10:04 +0000", "04 Jan 06 09:04 +0000"], []),
    (
        "9am to 5pm, monday to friday",
        [entry(times=times("09:00-17:00"), weekdays=["monday:friday"])],
        ["04 May 20 15:04 +0000", "05 May 20 10:04 +0000", "09 Jun 20 09:04 +0000"],
        ["03 May 20 15:04 +0000", "04 May 20 08:59 +0000", "05 May 20 05:00 +0000"],
    ),
    (
        "Easter 2020",
        [entry(daysOfMonth=["4:6"], months=["4"], years=["2020"])],
        ["04 Apr 20 15:04 +0000", "05 Apr 20 00:00 +0000", "06 Apr 20 23:05 +0000"],
        [
            "03 May 18 15:04 +0000",
            "03 Apr 20 23:59 +0000",
            "04 Jun 20 23:59 +0000",
            "06 Apr 19 23:59 +0000",
            "07 Apr 20 00:00 +0000",
        ],
    ),
    (
        "last 3 days of each month",
        [entry(daysOfMonth=["-3:-1"])],
        [
            "31 Jan 20 15:04 +0000",
            "30 Jan 20 15:04 +0000",
            "29 Jan 20 15:04 +0000",
            "30 Jun 20 00:00 +0000",
            "29 Feb 20 23:05 +0000",
        ],
        [
            "03 May 18 15:04 +0000",
            "27 Jan 20 15:04 +0000",
            "03 Apr 20 23:59 +0000",
            "04 Jun 20 23:59 +0000",
            "06 Apr 19 23:59 +0000",
            "07 Apr 20 00:00 +0000",
            "01 Mar 20 00:00 +0000",
        ],
    ),
    (
        # Alertmanager builds this one as a struct: '-31:31' is not valid syntax, '-31:-1' is the same days
        "out of bound days are clamped to the month",
        [entry(months=["6"], daysOfMonth=["-31:-1"])],
        ["30 Jun 20 00:00 +0000", "01 Jun 20 00:00 +0000"],
        ["31 May 20 00:00 +0000", "1 Jul 20 00:00 +0000"],
    ),
    (
        "AEST 9AM to 5PM, Monday to Friday",
        [entry(times=times("09:00-17:00"), weekdays=["monday:friday"], location="Australia/Sydney")],
        ["06 Apr 21 13:00 +1000"],
        ["06 Apr 21 13:00 +0000"],
    ),
    (
        "a zone during daylight saving time",
        [
            entry(
                times=times("09:00-17:00"),
                weekdays=["monday:friday"],
                months=["11"],
                location="Australia/Sydney",
            )
        ],
        ["01 Nov 21 09:00 +1100", "31 Oct 21 22:00 +0000"],
        ["31 Oct 21 21:00 +0000"],
    ),
    (
        "last-day mutes do not shift in spring-forward months",
        [entry(daysOfMonth=["-1"], location="America/New_York")],
        ["31 Mar 21 12:00 -0400"],
        ["30 Mar 21 12:00 -0400"],
    ),
    (
        "business hours",
        [entry(weekdays=["monday:friday"], times=times("09:00-17:00"))],
        ["08 Jul 20 09:00 +0000", "08 Jul 20 16:59 +0000", "01 Apr 21 13:00 +0000"],
        ["08 Jul 20 05:00 +0000", "08 Jul 20 08:59 +0000"],
    ),
    (
        "last week, excluding Saturday, of the first quarter, business hours, 2020-2025 and 2030-2035",
        [
            entry(
                weekdays=["monday:friday", "sunday"],
                months=["january:march"],
                daysOfMonth=["-7:-1"],
                years=["2020:2025", "2030:2035"],
                times=times("09:00-17:00"),
            )
        ],
        [
            "27 Jan 21 09:00 +0000",
            "28 Jan 21 16:59 +0000",
            "29 Jan 21 13:00 +0000",
            "31 Mar 25 13:00 +0000",
            "31 Jan 35 13:00 +0000",
        ],
        ["30 Jan 21 13:00 +0000", "01 Apr 21 13:00 +0000", "30 Jan 26 13:00 +0000", "31 Jan 35 17:01 +0000"],
    ),
    (
        "complete",
        [
            entry(
                weekdays=["monday:wednesday", "saturday", "sunday"],
                times=times("13:00-15:00"),
                daysOfMonth=["1", "10", "20:-1"],
                years=["2020:2023"],
                months=["january:march"],
            )
        ],
        ["10 Jan 21 13:00 +0000", "30 Jan 21 14:24 +0000"],
        ["09 Jan 21 13:00 +0000", "20 Jan 21 12:59 +0000", "02 Feb 21 13:00 +0000"],
    ),
    (
        "a start day after the end of the month is not clamped into it",
        [entry(daysOfMonth=["30:31"], years=["2020:2023"], months=["february"])],
        [],
        ["28 Feb 21 13:00 +0000"],
    ),
]


@pytest.mark.parametrize(
    ("intervals", "contains", "excludes"), [c[1:] for c in ALERTMANAGER], ids=[c[0] for c in ALERTMANAGER]
)
def test_alertmanager_vectors(
    intervals: list[TimeInterval], contains: list[str], excludes: list[str]
) -> None:
    for text in contains:
        assert matches(intervals, rfc822z(text)), text
    for text in excludes:
        assert not matches(intervals, rfc822z(text)), text


EVENINGS = [entry(times=times("00:00-09:00", "17:00-24:00"), location="Australia/Sydney")]
WEEKENDS = [entry(weekdays=["saturday", "sunday"], location="Australia/Sydney")]


@pytest.mark.parametrize(
    ("now", "muted_by"),
    [
        (datetime(2024, 1, 1, 0, 0, tzinfo=SYDNEY), {"evenings"}),
        (datetime(2024, 1, 1, 9, 0, tzinfo=SYDNEY), set()),
        (datetime(2024, 1, 6, 10, 0, tzinfo=SYDNEY), {"weekends"}),
        (datetime(2024, 1, 6, 17, 0, tzinfo=SYDNEY), {"evenings", "weekends"}),
        (datetime(2024, 1, 1, 10, 0, tzinfo=UTC), {"evenings"}),
        (datetime(2024, 1, 6, 10, 0, tzinfo=UTC), {"evenings", "weekends"}),
    ],
)
def test_alertmanager_intervener(now: datetime, muted_by: set[str]) -> None:
    """Alertmanager: ``TestIntervener_Mutes`` (two named intervals; here two lists, and one list of both)."""
    assert {
        name for name, ivs in (("evenings", EVENINGS), ("weekends", WEEKENDS)) if matches(ivs, now)
    } == muted_by
    assert matches(EVENINGS + WEEKENDS, now) is bool(muted_by)


# ---- the corners ----


def test_empty_lists_and_empty_entries() -> None:
    at = datetime(2026, 11, 27, 10, tzinfo=UTC)
    assert matches([], at) is False
    assert next_change([], at) is None
    assert matches([entry(), entry(years=["2020"])], at) is True
    assert next_change([entry(), entry(years=["2020"])], at) is None


def test_an_aware_datetime_is_required() -> None:
    with pytest.raises(ValueError, match="aware"):
        matches([entry(years=["2026"])], datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        next_change([entry(years=["2026"])], datetime(2026, 1, 1))


def test_an_invalid_list_is_refused() -> None:
    with pytest.raises(ValueError, match="fryday is not a valid weekday"):
        matches([entry(weekdays=["fryday"])], datetime(2026, 1, 1, tzinfo=UTC))


WEEKDAY_NIGHTS_BERLIN = [
    entry(weekdays=["monday:friday"], times=times("22:00-24:00"), location="Europe/Berlin"),
    entry(weekdays=["tuesday:saturday"], times=times("00:00-06:00"), location="Europe/Berlin"),
]


def test_weekday_nights_in_berlin() -> None:
    """The docs' example: one window from 22:00 to 06:00 the next morning, across local midnight."""
    friday_night = datetime(2026, 11, 27, 23, 30, tzinfo=BERLIN)
    assert matches(WEEKDAY_NIGHTS_BERLIN, friday_night)
    assert next_change(WEEKDAY_NIGHTS_BERLIN, friday_night) == datetime(2026, 11, 28, 6, 0, tzinfo=BERLIN)
    saturday = datetime(2026, 11, 28, 6, 0, tzinfo=BERLIN)
    assert not matches(WEEKDAY_NIGHTS_BERLIN, saturday)
    assert not matches(WEEKDAY_NIGHTS_BERLIN, datetime(2026, 11, 29, 23, 0, tzinfo=BERLIN))  # Sunday night
    assert next_change(WEEKDAY_NIGHTS_BERLIN, saturday) == datetime(2026, 11, 30, 22, 0, tzinfo=BERLIN)
    # 21:00 UTC is 22:00 in Berlin in winter, 23:00 in summer
    assert next_change(WEEKDAY_NIGHTS_BERLIN, datetime(2026, 11, 30, 12, tzinfo=UTC)) == datetime(
        2026, 11, 30, 21, tzinfo=UTC
    )
    assert next_change(WEEKDAY_NIGHTS_BERLIN, datetime(2026, 6, 1, 12, tzinfo=UTC)) == datetime(
        2026, 6, 1, 20, tzinfo=UTC
    )


def test_spring_forward_in_berlin() -> None:
    """2026-03-29 02:00 CET -> 03:00 CEST (01:00 UTC): 02:00-02:30 is never lived that day."""
    gap = [entry(times=times("02:00-02:30"), location="Europe/Berlin")]
    assert next_change(gap, datetime(2026, 3, 28, 12, tzinfo=UTC)) == datetime(2026, 3, 30, 0, 0, tzinfo=UTC)
    night = [entry(times=times("01:00-04:00"), location="Europe/Berlin")]
    start = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)  # 01:00 CET
    assert matches(night, start)
    assert next_change(night, start) == datetime(2026, 3, 29, 2, 0, tzinfo=UTC)  # 04:00 CEST: two hours lived
    midnight = [
        entry(times=times("00:00-24:00"), daysOfMonth=["29"], months=["march"], location="Europe/Berlin")
    ]
    begin = next_change(midnight, datetime(2026, 3, 1, tzinfo=UTC))
    assert begin == datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    assert next_change(midnight, begin) == datetime(2026, 3, 29, 22, 0, tzinfo=UTC)  # a day of 23 hours


def test_fall_back_in_berlin() -> None:
    """2026-10-25 03:00 CEST -> 02:00 CET (01:00 UTC): 02:00-02:30 is lived twice, and matches twice."""
    twice = [entry(times=times("02:00-02:30"), location="Europe/Berlin")]
    at = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)
    edges = []
    for _ in range(4):
        change = next_change(twice, at)
        assert change is not None
        edges.append(change)
        at = change
    assert edges == [
        datetime(2026, 10, 25, 0, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    ]
    whole_day = [entry(daysOfMonth=["25"], months=["october"], location="Europe/Berlin")]
    begin = next_change(whole_day, datetime(2026, 10, 1, tzinfo=UTC))
    assert begin == datetime(2026, 10, 24, 22, 0, tzinfo=UTC)
    assert next_change(whole_day, begin) == datetime(2026, 10, 25, 23, 0, tzinfo=UTC)  # a day of 25 hours


def test_new_york_transitions() -> None:
    """2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC); 2026-11-01 02:00 EDT -> 01:00 EST (06:00 UTC)."""
    early = [entry(times=times("01:30-03:30"), location="America/New_York")]
    assert next_change(early, datetime(2026, 3, 8, 0, tzinfo=UTC)) == datetime(2026, 3, 8, 6, 30, tzinfo=UTC)
    assert next_change(early, datetime(2026, 3, 8, 6, 30, tzinfo=UTC)) == datetime(
        2026, 3, 8, 7, 30, tzinfo=UTC
    )
    one_am = [entry(times=times("01:00-02:00"), location="America/New_York")]
    assert next_change(one_am, datetime(2026, 11, 1, 5, 0, tzinfo=UTC)) == datetime(
        2026, 11, 1, 7, 0, tzinfo=UTC
    )
    assert matches(one_am, datetime(2026, 11, 1, 6, 30, tzinfo=UTC))  # 01:30 EST, the second time


def test_24_00_ends_at_local_midnight() -> None:
    late = [entry(times=times("23:00-24:00"), location="America/New_York")]
    at = datetime(2026, 7, 4, 23, 30, tzinfo=NEW_YORK)
    assert matches(late, at)
    assert next_change(late, at) == datetime(2026, 7, 5, 0, 0, tzinfo=NEW_YORK)
    assert not matches(late, datetime(2026, 7, 5, 0, 0, tzinfo=NEW_YORK))


def test_negative_days_and_february() -> None:
    last_day = [entry(daysOfMonth=["-1"])]
    assert next_change(last_day, datetime(2026, 2, 1, tzinfo=UTC)) == datetime(2026, 2, 28, tzinfo=UTC)
    assert next_change(last_day, datetime(2028, 2, 1, tzinfo=UTC)) == datetime(2028, 2, 29, tzinfo=UTC)
    assert next_change(last_day, datetime(2026, 4, 1, tzinfo=UTC)) == datetime(2026, 4, 30, tzinfo=UTC)
    assert next_change(last_day, datetime(2026, 4, 30, 5, tzinfo=UTC)) == datetime(2026, 5, 1, tzinfo=UTC)
    # -31:-29 is days 1..3 of a 31-day month, day 1..2 of a 30-day one, day 1 of a leap February, none of a
    # common one (Alertmanager resolves negative days against the month, then clamps)
    head = [entry(daysOfMonth=["-31:-29"])]
    assert matches(head, datetime(2026, 1, 3, tzinfo=UTC))
    assert not matches(head, datetime(2026, 4, 3, tzinfo=UTC))
    assert matches(head, datetime(2028, 2, 1, tzinfo=UTC))
    assert not matches(head, datetime(2027, 2, 1, tzinfo=UTC))
    assert matches([entry(daysOfMonth=["31"])], datetime(2026, 1, 31, tzinfo=UTC))
    assert next_change([entry(daysOfMonth=["31"])], datetime(2026, 4, 1, tzinfo=UTC)) == datetime(
        2026, 5, 31, tzinfo=UTC
    )


def test_leap_years() -> None:
    leap_day = [entry(months=["february"], daysOfMonth=["29"])]
    at = datetime(2026, 3, 1, tzinfo=UTC)
    assert next_change(leap_day, at) is None  # not within a year
    assert next_change(leap_day, at, horizon=timedelta(days=3 * 366)) == datetime(2028, 2, 29, tzinfo=UTC)
    assert next_change(leap_day, datetime(2028, 2, 29, 12, tzinfo=UTC)) == datetime(2028, 3, 1, tzinfo=UTC)
    century = [entry(months=["february"], daysOfMonth=["29"], years=["2100:2101"])]
    assert next_change(century, datetime(2099, 1, 1, tzinfo=UTC), horizon=timedelta(days=3 * 366)) is None


def test_months_and_years_are_jumped_over() -> None:
    xmas = [entry(months=["december"], daysOfMonth=["24:26"], location="Europe/Berlin")]
    assert next_change(xmas, datetime(2026, 1, 10, tzinfo=UTC)) == datetime(2026, 12, 23, 23, tzinfo=UTC)
    future = [entry(years=["2030"], months=["june"])]
    assert next_change(future, datetime(2026, 1, 1, tzinfo=UTC)) is None
    assert next_change(future, datetime(2026, 1, 1, tzinfo=UTC), horizon=timedelta(days=5 * 366)) == datetime(
        2030, 6, 1, tzinfo=UTC
    )
    past = [entry(years=["2020:2025"])]
    assert next_change(past, datetime(2026, 1, 1, tzinfo=UTC), horizon=timedelta(days=365 * 7000)) is None


def test_the_horizon_is_inclusive() -> None:
    daily = [entry(times=times("12:00-13:00"))]
    at = datetime(2026, 1, 1, 11, 0, tzinfo=UTC)
    assert next_change(daily, at, horizon=timedelta(hours=1)) == datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert next_change(daily, at, horizon=timedelta(minutes=59)) is None
    assert next_change(daily, at, horizon=timedelta(0)) is None
    assert next_change(daily, datetime(9999, 12, 30, tzinfo=UTC)) is None


def test_a_seconds_past_the_minute_instant() -> None:
    daily = [entry(times=times("12:00-13:00"))]
    at = datetime(2026, 1, 1, 12, 59, 59, 999999, tzinfo=UTC)
    assert matches(daily, at)
    assert next_change(daily, at) == datetime(2026, 1, 1, 13, tzinfo=UTC)


def test_zones_are_or_ed() -> None:
    """Two entries in two zones: the list matches while either does; its edges are the union's."""
    mixed = [
        entry(times=times("09:00-17:00"), location="Europe/Berlin"),  # 08:00-16:00 UTC in winter
        entry(times=times("09:00-17:00"), location="America/New_York"),  # 14:00-22:00 UTC in winter
    ]
    at = datetime(2026, 1, 5, 7, tzinfo=UTC)
    assert next_change(mixed, at) == datetime(2026, 1, 5, 8, tzinfo=UTC)
    assert next_change(mixed, datetime(2026, 1, 5, 8, tzinfo=UTC)) == datetime(2026, 1, 5, 22, tzinfo=UTC)


def test_a_compiled_list_is_reused() -> None:
    intervals = [entry(weekdays=["monday"])]
    assert compiled(intervals) is compiled(intervals)
    assert compiled(intervals) is compiled([entry(weekdays=["monday"])])  # by content too


def test_the_worst_case_is_bounded() -> None:
    """The most work one list can ask for: 32 entries of 32 ranges whose union matches always but only across
    two zones (Berlin: two minutes of every three, UTC: the third; offsets are whole hours), so no zone's own
    ranges merge, no edge comes for a year and every day has about 2,000 UTC intervals to merge."""

    def hhmm(minute: int) -> str:
        return f"{minute // 60:02}:{minute % 60:02}"

    berlin = [{"startTime": hhmm(m), "endTime": hhmm(m + 2)} for m in range(0, 1440, 3)]
    utc = [{"startTime": hhmm(m + 2), "endTime": hhmm(m + 3)} for m in range(0, 1440, 3)]
    entries = [entry(times=berlin[i : i + 32], location="Europe/Berlin") for i in range(0, 480, 32)]
    entries += [entry(times=utc[i : i + 32]) for i in range(0, 480, 32)]
    assert len(entries) <= 32
    at = datetime(2026, 11, 27, 10, tzinfo=UTC)
    assert matches(entries, at)
    started = time.perf_counter()
    assert next_change(entries, at) is None
    assert time.perf_counter() - started < 5  # about 30 ms when the machine is idle
    # asked again a minute later (the next held notification): one more day is looked at, not a year
    started = time.perf_counter()
    assert next_change(entries, at + timedelta(minutes=1)) is None
    assert time.perf_counter() - started < 1  # about 0.1 ms when the machine is idle
    # memory: what the compiled list keeps of its per-day unions stays within the budget
    kept = sum(len(union) for zone in compiled(entries).zones for union in zone._unions.values())
    assert kept <= UNION_BUDGET


def test_the_worst_case_with_a_new_key_every_day_is_bounded() -> None:
    """As above (24 entries whose union never ends: Berlin three minutes of every four, UTC the fourth), and 8
    entries whose ``daysOfMonth`` and ``weekdays`` are the bits of the day's number, so no two days look
    alike and no day's union is kept for another."""

    def hhmm(minute: int) -> str:
        return f"{minute // 60:02}:{minute % 60:02}"

    berlin = [{"startTime": hhmm(m), "endTime": hhmm(m + 3)} for m in range(0, 1440, 4)]
    utc = [{"startTime": hhmm(m + 3), "endTime": hhmm(m + 4)} for m in range(0, 1440, 4)]
    entries = [entry(times=berlin[i : i + 30], location="Europe/Berlin") for i in range(0, 360, 30)]
    entries += [entry(times=utc[i : i + 30]) for i in range(0, 360, 30)]
    first_minutes = times("00:00-00:05")
    for bit in range(5):
        days = [str(d) for d in range(1, 32) if d >> bit & 1]
        entries.append(entry(daysOfMonth=days, times=first_minutes, location="Europe/Berlin"))
    for bit in range(3):
        entries.append(entry(weekdays=[DAYS[d] for d in range(7) if d >> bit & 1], times=first_minutes))
    assert len(entries) == 32
    at = datetime(2026, 11, 27, 10, tzinfo=UTC)
    started = time.perf_counter()
    assert next_change(entries, at) is None
    assert time.perf_counter() - started < 10  # about 0.25 s when the machine is idle
    assert len(compiled(entries)._windows) == MAX_DAY_KEYS  # the days did not share a key: kept, bounded


def test_matches_is_cheap() -> None:
    """The figure in ``core/timeintervals.py``'s docstring: one entry in a named zone, compiled once."""
    business = [entry(weekdays=["monday:friday"], times=times("09:00-17:00"), location="Europe/Berlin")]
    at = datetime(2026, 11, 27, 10, tzinfo=UTC)
    calls = 20_000
    started = time.perf_counter()
    for _ in range(calls):
        matches(business, at)
    per_call = (time.perf_counter() - started) / calls
    assert per_call < 100e-6  # about 1.2 µs when the machine is idle


# ---- next_change against a minute-by-minute scan ----

ZONES = [
    None,
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Australia/Lord_Howe",  # a 30-minute DST shift
    "Asia/Kathmandu",  # +05:45
    "America/Santiago",  # DST at midnight
]
DAYS = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
# instants a few hours before the 2026 transitions of those zones, and ordinary ones
STARTS = [
    datetime(2026, 3, 29, 0, tzinfo=UTC),
    datetime(2026, 10, 25, 0, tzinfo=UTC),
    datetime(2026, 3, 8, 4, tzinfo=UTC),
    datetime(2026, 11, 1, 3, tzinfo=UTC),
    datetime(2026, 4, 4, 12, tzinfo=UTC),
    datetime(2026, 10, 3, 12, tzinfo=UTC),
    datetime(2026, 9, 5, 2, tzinfo=UTC),
    datetime(2026, 2, 27, 20, tzinfo=UTC),
    datetime(2028, 2, 28, 12, tzinfo=UTC),
]


@st.composite
def time_ranges(draw: st.DrawFn) -> dict[str, str]:
    start = draw(st.integers(0, 1439))
    end = draw(st.integers(start + 1, 1440))
    return {"startTime": f"{start // 60:02}:{start % 60:02}", "endTime": f"{end // 60:02}:{end % 60:02}"}


@st.composite
def intervals(draw: st.DrawFn) -> TimeInterval:
    fields: dict[str, Any] = {}
    if draw(st.booleans()):
        fields["times"] = draw(st.lists(time_ranges(), min_size=1, max_size=3))
    if draw(st.integers(0, 2)) == 0:
        first = draw(st.integers(0, 6))
        fields["weekdays"] = [f"{DAYS[first]}:{DAYS[draw(st.integers(first, 6))]}"]
    if draw(st.integers(0, 2)) == 0:
        fields["daysOfMonth"] = [
            draw(st.sampled_from(["1:5", "-3:-1", "-1", "28:31", "29", "1:-1", "-31:-29", "2"]))
        ]
    if draw(st.integers(0, 3)) == 0:
        fields["months"] = [draw(st.sampled_from(["march", "october:november", "1:3", "february", "9:12"]))]
    location = draw(st.sampled_from(ZONES))
    if location:
        fields["location"] = location
    return TimeInterval.model_validate(fields)


def scanned(ivs: list[TimeInterval], at: datetime, minutes: int) -> datetime | None:
    """The first minute boundary after ``at`` at which ``matches`` flips: every zone here has whole-minute
    offsets, so every edge is on one."""
    state = matches(ivs, at)
    minute = at.replace(second=0, microsecond=0)
    for i in range(1, minutes + 1):
        candidate = minute + timedelta(minutes=i)
        if matches(ivs, candidate) is not state:
            return candidate
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(intervals(), min_size=1, max_size=3),
    st.sampled_from(STARTS),
    st.integers(-36 * 3600, 12 * 3600),  # the 2-day horizon mostly spans the transition,
    st.integers(0, 999_999),
)
def test_next_change_is_the_first_flip(
    ivs: list[TimeInterval], base: datetime, shift: int, micros: int
) -> None:
    at = base + timedelta(seconds=shift, microseconds=micros)
    horizon = timedelta(days=2)
    expected = scanned(ivs, at, 2 * 1440 + 1)
    if expected is not None and expected > at + horizon:
        expected = None
    assert next_change(ivs, at, horizon) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(intervals(), min_size=1, max_size=3), st.sampled_from(STARTS))
def test_successive_changes_alternate(ivs: list[TimeInterval], at: datetime) -> None:
    """Over a month: each change flips ``matches`` and nothing flips between two changes (sampled hourly and
    just before each change)."""
    end = at + timedelta(days=31)
    state = matches(ivs, at)
    while True:
        change = next_change(ivs, at, end - at)
        probe = at + timedelta(hours=1)
        while probe < (change or end):
            assert matches(ivs, probe) is state
            probe += timedelta(hours=1)
        if change is None:
            break
        assert change > at
        assert matches(ivs, change - timedelta(microseconds=1)) is state
        assert matches(ivs, change) is not state
        at, state = change, not state


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(intervals(), min_size=1, max_size=3),
    st.sampled_from(STARTS),
    st.lists(st.tuples(st.integers(0, 36 * 3600), st.integers(1, 36 * 3600)), min_size=2, max_size=5),
)
def test_remembered_answers_are_the_fresh_ones(
    ivs: list[TimeInterval], base: datetime, asks: list[tuple[int, int]]
) -> None:
    """The same list asked again and again (later and earlier instants, longer and shorter horizons) answers
    as a minute-by-minute scan does."""
    for shift, horizon in asks:
        at = base + timedelta(seconds=shift)
        expected = scanned(ivs, at, horizon // 60 + 1)
        if expected is not None and expected > at + timedelta(seconds=horizon):
            expected = None
        assert next_change(ivs, at, timedelta(seconds=horizon)) == expected

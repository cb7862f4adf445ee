"""The syntax of an Alert's ``muteTimes`` / ``activeTimes`` entries: Alertmanager's parser, field by field.

The vectors marked "Alertmanager" are carried over from prometheus/alertmanager
``timeinterval/timeinterval_test.go`` (``timeStringTestCases`` and ``yamlUnmarshalTestCases``, the YAML keys
in camelCase): the same inputs are accepted or refused, with Alertmanager's message where it names the
problem well (two messages say more here: a reversed weekday range and a reversed time range).
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from notification_controller.api.alert import AlertSpec
from notification_controller.api.timeinterval import (
    MAX_RANGES,
    MONTHS,
    WEEKDAYS,
    TimeInterval,
    TimeRange,
    load_location,
    parse_day_of_month_range,
    parse_month_range,
    parse_time_range,
    parse_weekday_range,
    parse_year_range,
)
from notification_controller.check import check_texts


def errors(**fields: Any) -> list[str]:
    return TimeInterval.model_validate(fields).validation_errors("spec.muteTimes[0]")


# ---- Alertmanager: timeStringTestCases ----


@pytest.mark.parametrize(
    ("start", "end", "minutes"),
    [("00:00", "24:00", (0, 1440)), ("01:35", "17:39", (95, 1059)), ("09:35", "09:39", (575, 579))],
)
def test_alertmanager_time_ranges(start: str, end: str, minutes: tuple[int, int]) -> None:
    assert parse_time_range(start, end) == minutes
    assert errors(times=[{"startTime": start, "endTime": end}]) == []


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("17:31", "17:31"),  # begin and end times are the same
        ("12:30", "24:01"),  # end time out of range
        ("09:30", "07:41"),  # start time greater than end time
        ("24:00", "17:41"),  # start time out of range and greater than end time
    ],
)
def test_alertmanager_bad_time_ranges(start: str, end: str) -> None:
    with pytest.raises(ValueError, match=r"timestamp|cannot be equal or greater"):
        parse_time_range(start, end)
    [message] = errors(
        times=[{"startTime": "01:00", "endTime": "02:00"}, {"startTime": start, "endTime": end}]
    )
    assert message.startswith("spec.muteTimes[0].times[1]: ")


def test_a_time_range_needs_both_ends() -> None:
    """Alertmanager: 'both start and end times must be provided' (here the model itself requires them)."""
    with pytest.raises(ValidationError, match="endTime"):
        TimeRange.model_validate({"startTime": "14:03"})


def test_24_00_is_an_end_only() -> None:
    assert errors(times=[{"startTime": "24:00", "endTime": "24:00"}]) == [
        "spec.muteTimes[0].times[0]: start time 24:00 cannot be equal or greater than end time 24:00"
    ]
    assert errors(times=[{"startTime": "23:59", "endTime": "24:00"}]) == []


@pytest.mark.parametrize(
    "value", ["1:00", "01:60", "0100", "01:00:00", " 01:00", "01:00\n", "２３:00", "-1:00"]
)
def test_times_are_exactly_hh_mm(value: str) -> None:
    assert errors(times=[{"startTime": value, "endTime": "24:00"}]) == [
        f"spec.muteTimes[0].times[0]: couldn't parse timestamp {value if value.isprintable() and value.strip() == value else repr(value)}, invalid format"
    ]


# ---- Alertmanager: yamlUnmarshalTestCases ----


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"times": [{"startTime": "01:99", "endTime": "23:59"}]},
            "couldn't parse timestamp 01:99, invalid format",
        ),
        (
            {"times": [{"startTime": "00:00", "endTime": "99:99"}]},
            "couldn't parse timestamp 99:99, invalid format",
        ),
        ({"weekdays": ["blurgsday:flurgsday"]}, "blurgsday is not a valid weekday"),
        ({"weekdays": ["1:3"]}, "1 is not a valid weekday"),  # numeric weekdays aren't allowed
        ({"weekdays": ["-2:-1"]}, "-2 is not a valid weekday"),
        ({"daysOfMonth": ["0"]}, "0 is not a valid day of the month: out of range"),
        ({"daysOfMonth": ["-50:-20"]}, "-50 is not a valid day of the month: out of range"),
        ({"daysOfMonth": ["1:50"]}, "50 is not a valid day of the month: out of range"),
        ({"daysOfMonth": ["-15:5"]}, "end day must be negative if start day is negative"),
        ({"daysOfMonth": ["10:-25"]}, "end day -25 is always before start day 10"),
        ({"months": ["martius:june"]}, "martius is not a valid month"),
        ({"months": ["march:junius"]}, "junius is not a valid month"),
        ({"months": ["december:january"]}, "end month january is before start month december"),
        ({"years": ["2022:2020"]}, "end year 2020 is before start year 2022"),
    ],
)
def test_alertmanager_parse_errors(fields: dict[str, Any], message: str) -> None:
    [error] = errors(**fields)
    field = next(iter(fields))
    assert error == f"spec.muteTimes[0].{field}[0]: {message}"


def test_alertmanager_reversed_weekdays_name_both_days() -> None:
    """Alertmanager says 'start day cannot be before end day' for 'friday:monday'; this names both days."""
    [error] = errors(weekdays=["friday:monday"])
    assert error.startswith("spec.muteTimes[0].weekdays[0]: end day monday is before start day friday")


def test_alertmanager_valid_entries() -> None:
    assert parse_weekday_range("monday:friday") == (1, 5)
    assert parse_weekday_range("sunday") == (0, 0)
    assert parse_day_of_month_range("-7:-1") == (-7, -1)
    assert parse_day_of_month_range("1:-1") == (1, -1)  # negative indices work
    assert parse_month_range("January:december") == (1, 12)  # regardless of case
    assert parse_year_range("2020:2025") == (2020, 2025)
    assert (
        errors(
            weekdays=["monday:friday", "sunday"],
            months=["january:march"],
            daysOfMonth=["-7:-1"],
            years=["2020:2025", "2030:2035"],
            times=[{"startTime": "09:00", "endTime": "17:00"}],
        )
        == []
    )
    assert errors(years=["2020:2022"], location="Australia/Sydney") == []
    assert errors(daysOfMonth=["1", "10", "20:-1"], weekdays=["monday:wednesday", "saturday", "sunday"]) == []


# ---- beyond the vectors ----


def test_names_are_any_case_and_numbers_follow_go_atoi() -> None:
    assert parse_weekday_range("MONDAY:Friday") == (1, 5)
    assert parse_month_range("1:3") == (1, 3)
    assert parse_month_range("+2:05") == (2, 5)  # strconv.Atoi takes a sign and leading zeros
    assert parse_day_of_month_range("+1:-1") == (1, -1)
    assert parse_year_range("2026") == (2026, 2026)
    for bad in ("1.5", "1_0", " 1", "１", "0x1", ""):
        with pytest.raises(ValueError, match="not a valid day of the month"):
            parse_day_of_month_range(bad)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"months": ["13"]}, "months[0]: 13 is not a valid month: out of range (1..12)"),
        ({"months": ["0:3"]}, "months[0]: 0 is not a valid month: out of range (1..12)"),
        ({"weekdays": ["monday:tuesday:friday"]}, "weekdays[0]: couldn't parse range monday:tuesday:friday"),
        ({"weekdays": ["monday:"]}, "weekdays[0]: '' is not a valid weekday"),
        ({"weekdays": []}, "weekdays is empty (leave it out to match every one)"),
        ({"times": []}, "times is empty (leave it out to match every time of day)"),
        ({"years": ["2026:" + "9" * 25]}, "years[0]: " + "9" * 25 + " is not a valid year: out of range"),
        ({"years": ["x" * 33]}, "years[0]: is 33 characters long, more than 32"),
        ({"daysOfMonth": ["1"] * (MAX_RANGES + 1)}, f"daysOfMonth has 33 ranges, more than {MAX_RANGES}"),
        ({"location": "Mars/Olympus_Mons"}, "location: unknown time zone 'Mars/Olympus_Mons'"),
        ({"location": "../../etc/passwd"}, "location: unknown time zone '../../etc/passwd'"),
        ({"location": "/etc/localtime"}, "location: unknown time zone '/etc/localtime'"),
        ({"location": "America"}, "location: unknown time zone 'America'"),
        ({"location": "Local"}, "location: 'Local' is the controller's own time zone"),
        ({"location": "E" * 65}, "location: is 65 characters long, more than 64"),
    ],
)
def test_refused_with_the_field_named(fields: dict[str, Any], message: str) -> None:
    [error] = errors(**fields)
    assert error.startswith(f"spec.muteTimes[0].{message}")


@pytest.mark.parametrize("location", [None, "", "UTC", "Europe/Berlin", "America/New_York", "Etc/GMT+5"])
def test_locations(location: str | None) -> None:
    assert errors(location=location) == []
    zone = load_location(location)
    assert zone is UTC if location in (None, "", "UTC") else getattr(zone, "key", None) == location


def test_an_alert_reports_every_bad_entry() -> None:
    spec = AlertSpec.model_validate(
        {
            "providerRef": {"name": "slack"},
            "eventSources": [{"kind": "Kustomization", "name": "*"}],
            "muteTimes": [{"weekdays": ["monday:friday"]}, {"weekdays": ["monday", "fryday"]}],
            "activeTimes": [{"location": "Europe/Berln"}],
        }
    )
    assert spec.validation_errors() == [
        "spec.muteTimes[1].weekdays[1]: fryday is not a valid weekday",
        "spec.activeTimes[0].location: unknown time zone 'Europe/Berln' "
        "(an IANA time zone, e.g. 'Europe/Berlin', 'America/New_York')",
    ]


_WEEKDAY_NAMES = st.sampled_from(sorted(WEEKDAYS))
_MONTH_NAMES = st.sampled_from(sorted(MONTHS))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_parsed_or_refused_with_a_message(text: str) -> None:
    for parse in (parse_weekday_range, parse_day_of_month_range, parse_month_range, parse_year_range):
        message = ""
        try:
            begin, end = parse(text)
        except ValueError as exc:
            message = str(exc)
        else:
            assert begin <= end or parse is parse_day_of_month_range
            continue
        assert message  # never a bare exception, never another type


@settings(max_examples=200, deadline=None)
@given(_WEEKDAY_NAMES, _WEEKDAY_NAMES, _MONTH_NAMES, _MONTH_NAMES)
def test_ranges_of_names_are_valid_exactly_when_ordered(
    day1: str, day2: str, month1: str, month2: str
) -> None:
    weekday_ok = WEEKDAYS[day1] <= WEEKDAYS[day2]
    month_ok = MONTHS[month1] <= MONTHS[month2]
    assert (errors(weekdays=[f"{day1}:{day2}"]) == []) is weekday_ok
    assert (errors(months=[f"{month1.upper()}:{month2}"]) == []) is month_ok
    if weekday_ok:
        assert parse_weekday_range(f"{day1}:{day2}") == (WEEKDAYS[day1], WEEKDAYS[day2])


@settings(max_examples=200, deadline=None)
@given(st.integers(-40, 40), st.integers(-40, 40))
def test_days_of_month_follow_alertmanagers_rules(begin: int, end: int) -> None:
    valid = (
        begin != 0
        and end != 0
        and -31 <= begin <= 31
        and -31 <= end <= 31
        and not (begin < 0 < end)
        and (28 + begin if begin < 0 else begin) <= (28 + end if end < 0 else end)
    )
    assert (errors(daysOfMonth=[f"{begin}:{end}"]) == []) is valid


def test_check_prints_each_bad_entry_at_its_line() -> None:
    """``notification-controller check``: one line per bad value, at the line of its field, the field once."""
    text = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: on-call, namespace: apps}
spec:
  providerRef: {name: hook}
  eventSources: [{kind: Kustomization, name: "*"}]
  muteTimes:
    - weekdays: ["monday:friday"]
      times: [{startTime: "22:00", endTime: "24:00"}]
    - weekdays: ["saturday", "fryday"]
  activeTimes:
    - location: Europe/Berln
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: hook, namespace: apps}
spec: {type: generic, address: "https://example.com/hook"}
"""
    lines = [finding.text() for finding in check_texts([("alerts.yaml", text)])]
    assert lines == [
        "alerts.yaml:10: Alert apps/on-call: spec.muteTimes[1].weekdays[1]: fryday is not a valid weekday",
        "alerts.yaml:12: Alert apps/on-call: spec.activeTimes[0].location: unknown time zone 'Europe/Berln' "
        "(an IANA time zone, e.g. 'Europe/Berlin', 'America/New_York')",
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=70),
        st.lists(
            st.sampled_from(["Europe", "..", ".", "", "Berlin", "zone.tab", "__init__.py", "UTC"]), max_size=4
        ).map("/".join),
    )
)
def test_any_location_loads_or_is_refused_with_a_message(name: str) -> None:
    """A location is a path into the zone database: whatever a tenant writes is a zone or a ValueError
    (never a file outside it, an OSError or a KeyError)."""
    message = ""
    try:
        zone = load_location(name)
    except ValueError as exc:
        message = str(exc)
    else:
        assert zone is UTC or getattr(zone, "key", None) == name
        return
    assert message

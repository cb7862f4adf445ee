"""Alertmanager's ``time_interval`` in camelCase: the entries of an Alert's ``spec.muteTimes`` and
``spec.activeTimes`` (issue 26 item 3).

The shape and the value syntax are Alertmanager's (``times``: ``HH:MM`` ranges, end exclusive, ``24:00``
allowed as an end; ``weekdays``: ``monday`` or ``monday:friday``; ``daysOfMonth``: ``1``, ``1:5``, negative
from the end of the month, ``-3:-1``; ``months``: ``january``, ``1:3``, ``may:august``; ``years``: ``2026``,
``2026:2027``; ``location``: an IANA zone, UTC by default). An entry matches an instant when every field it
gives matches (an empty entry matches always); a list matches when any entry does.

This module is the shape (what the CRD and a manifest may say, bounded) and the syntax of each value: the
``parse_*`` functions below turn one range string into numbers or raise ``ValueError`` with Alertmanager's
message. They mirror ``timeinterval/timeinterval.go`` of prometheus/alertmanager (the rules and the messages;
its test vectors are in ``tests/unit/api/test_timeinterval.py``), with three deliberate differences, each
rejecting a config Alertmanager accepts but can never mean:

- a month number outside ``1..12`` (Alertmanager accepts ``13`` and never matches it);
- an empty list (``weekdays: []``: Alertmanager matches no instant at all; leave the field out instead);
- the location ``Local`` (the controller's own zone: two replicas could disagree).

The model itself stays lenient (a bad value still parses into the model) so that an Alert with a bad interval
reaches the reconciler and is reported ``Ready=False`` naming the field (``TimeInterval.validation_errors``).
What an entry means at an instant is ``core/timeintervals.py``, which uses the same ``parse_*`` functions.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Callable
from datetime import UTC, tzinfo

from pydantic import Field
from pydantic.config import JsonDict

from .common import Model

MAX_TIME_INTERVALS = 32
"""Most entries in ``spec.muteTimes`` and in ``spec.activeTimes`` (each)."""
MAX_RANGES = 32
"""Most ranges in one field of an entry (``times``, ``weekdays``...)."""
MAX_RANGE_LENGTH = 32
"""Longest range string (``september:december`` is 18)."""
MAX_LOCATION_LENGTH = 64
"""Longest ``location`` (the longest IANA name, ``America/Argentina/ComodRivadavia``, is 32)."""

_RANGES: JsonDict = {"maxItems": MAX_RANGES, "items": {"type": "string", "maxLength": MAX_RANGE_LENGTH}}

WEEKDAYS: dict[str, int] = {
    "sunday": 0,
    "monday": 1,
    "tuesday": 2,
    "wednesday": 3,
    "thursday": 4,
    "friday": 5,
    "saturday": 6,
}
"""Weekday names (any case) to numbers, Sunday 0 as in Go's ``time.Weekday`` and Alertmanager."""
MONTHS: dict[str, int] = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
}
_MONTH_NAMES = {number: name for name, number in MONTHS.items()}

_TIME = re.compile(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]|24:00")
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi accepts (ASCII digits, one optional sign)
_INT64 = 2**63

_Member = Callable[[str], int]


class TimeRange(Model):
    """``startTime`` inclusive, ``endTime`` exclusive, both ``HH:MM`` in the entry's location."""

    start_time: str = Field(
        description="Start of the range, HH:MM (inclusive).",
        json_schema_extra={"pattern": r"^([01][0-9]|2[0-3]):[0-5][0-9]$"},
    )
    end_time: str = Field(
        description="End of the range, HH:MM (exclusive; 24:00 is the end of the day).",
        json_schema_extra={"pattern": r"^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$"},
    )


class TimeInterval(Model):
    """One Alertmanager ``time_interval`` entry; every field given must match."""

    times: list[TimeRange] | None = Field(
        None,
        description=(
            "Times of day, each startTime to endTime (HH:MM; start inclusive, end exclusive, 24:00 as an end "
            "only); a range does not run past midnight."
        ),
        json_schema_extra={"maxItems": MAX_RANGES},
    )
    weekdays: list[str] | None = Field(
        None,
        description=(
            "Days of the week by name (any case) or ranges of them, e.g. 'monday:friday', 'saturday'; a range "
            "does not wrap around the week."
        ),
        json_schema_extra=_RANGES,
    )
    days_of_month: list[str] | None = Field(
        None,
        description=(
            "Days of the month, 1 to 31 or -31 to -1 counted from the month's end, or ranges of them, e.g. "
            "'1:5', '-1' (the last day), '-7:-1'."
        ),
        json_schema_extra=_RANGES,
    )
    months: list[str] | None = Field(
        None,
        description="Months by name (any case) or number (1 to 12), or ranges of them, e.g. 'january:march', '12'.",
        json_schema_extra=_RANGES,
    )
    years: list[str] | None = Field(
        None, description="Years or ranges of years, e.g. '2026', '2026:2027'.", json_schema_extra=_RANGES
    )
    location: str | None = Field(
        None,
        description="The IANA time zone the other fields are read in, e.g. 'Europe/Berlin' (default UTC).",
        json_schema_extra={"maxLength": MAX_LOCATION_LENGTH},
    )

    def validation_errors(self, where: str) -> list[str]:
        """What Alertmanager's parser would reject, each message naming the field
        (``spec.muteTimes[0].weekdays[1]: blurgsday is not a valid weekday``); empty when valid."""
        errors: list[str] = []
        if self.times is not None:
            if not self.times:
                errors.append(f"{where}.times is empty (leave it out to match every time of day)")
            elif len(self.times) > MAX_RANGES:
                errors.append(f"{where}.times has {len(self.times)} ranges, more than {MAX_RANGES}")
            else:
                for i, time_range in enumerate(self.times):
                    try:
                        parse_time_range(time_range.start_time, time_range.end_time)
                    except ValueError as exc:
                        errors.append(f"{where}.times[{i}]: {exc}")
        for field, name, parse in (
            ("weekdays", "weekdays", parse_weekday_range),
            ("days_of_month", "daysOfMonth", parse_day_of_month_range),
            ("months", "months", parse_month_range),
            ("years", "years", parse_year_range),
        ):
            values: list[str] | None = getattr(self, field)
            if values is None:
                continue
            if not values:
                errors.append(f"{where}.{name} is empty (leave it out to match every one)")
            elif len(values) > MAX_RANGES:
                errors.append(f"{where}.{name} has {len(values)} ranges, more than {MAX_RANGES}")
            else:
                for i, value in enumerate(values):
                    try:
                        parse(value)
                    except ValueError as exc:
                        errors.append(f"{where}.{name}[{i}]: {exc}")
        if self.location is not None:
            try:
                load_location(self.location)
            except ValueError as exc:
                errors.append(f"{where}.location: {exc}")
        return errors


def parse_time(value: str) -> int:
    """``HH:MM`` (``00:00``..``23:59``, or ``24:00``) as minutes since midnight."""
    if len(value) > MAX_RANGE_LENGTH or not _TIME.fullmatch(value):
        raise ValueError(f"couldn't parse timestamp {_shown(value)}, invalid format")
    hours, minutes = value.split(":")
    return int(hours) * 60 + int(minutes)


def parse_time_range(start: str, end: str) -> tuple[int, int]:
    """A ``times`` entry as ``(start, end)`` minutes since midnight, start inclusive, end exclusive."""
    begin, finish = parse_time(start), parse_time(end)
    if begin >= finish:
        raise ValueError(f"start time {start} cannot be equal or greater than end time {end}")
    return begin, finish


def parse_weekday_range(value: str) -> tuple[int, int]:
    """``monday`` or ``monday:friday`` (any case) as ``(begin, end)``, Sunday 0; ranges do not wrap."""
    begin, end = _range(value, _weekday)
    if begin > end:
        raise ValueError(
            f"end day {_day_name(end)} is before start day {_day_name(begin)} "
            "(ranges do not wrap around the week: write 'friday:saturday', 'sunday:monday')"
        )
    return begin, end


def parse_day_of_month_range(value: str) -> tuple[int, int]:
    """``1``, ``1:5``, ``-1`` (the last day), ``-3:-1``, ``1:-1`` as ``(begin, end)``; Alertmanager's rules:
    each in ``-31..-1`` or ``1..31``, a negative start needs a negative end, and a range that is empty in
    every month (checked against a 28-day month) is refused."""
    begin, end = _range(value, _integer("day of the month"))
    for day in (begin, end):
        if day == 0 or not -31 <= day <= 31:
            raise ValueError(f"{day} is not a valid day of the month: out of range")
    if begin < 0 < end:
        raise ValueError("end day must be negative if start day is negative")
    check_begin = 28 + begin if begin < 0 else begin
    check_end = 28 + end if end < 0 else end
    if check_begin > check_end:
        raise ValueError(f"end day {end} is always before start day {begin}")
    return begin, end


def parse_month_range(value: str) -> tuple[int, int]:
    """``january``, ``1``, ``january:march``, ``1:3`` (names in any case) as ``(begin, end)``, 1..12."""
    begin, end = _range(value, _month)
    if begin > end:
        raise ValueError(f"end month {_MONTH_NAMES[end]} is before start month {_MONTH_NAMES[begin]}")
    return begin, end


def parse_year_range(value: str) -> tuple[int, int]:
    """``2026`` or ``2026:2027`` as ``(begin, end)``."""
    begin, end = _range(value, _integer("year"))
    if begin > end:
        raise ValueError(f"end year {end} is before start year {begin}")
    return begin, end


def load_location(name: str | None) -> tzinfo:
    """The zone an entry is read in: UTC when absent or empty (as Go's ``time.LoadLocation("")``), else the
    IANA zone from the system's database or the ``tzdata`` package. ``ValueError`` when it is not one."""
    if not name or name == "UTC":
        return UTC
    if len(name) > MAX_LOCATION_LENGTH:
        raise ValueError(f"is {len(name)} characters long, more than {MAX_LOCATION_LENGTH}")
    if name == "Local":
        raise ValueError(
            "'Local' is the controller's own time zone: name an IANA time zone, e.g. 'Europe/Berlin'"
        )
    try:
        return zoneinfo.ZoneInfo(name)
    except (ValueError, OSError, LookupError):  # ZoneInfoNotFoundError is a KeyError; a directory an OSError
        raise ValueError(
            f"unknown time zone {name!r} (an IANA time zone, e.g. 'Europe/Berlin', 'America/New_York')"
        ) from None


def _range(value: str, member: _Member) -> tuple[int, int]:
    """Alertmanager's ``stringableRangeFromString``: lower-cased, ``a`` or ``a:b``."""
    if len(value) > MAX_RANGE_LENGTH:
        raise ValueError(f"is {len(value)} characters long, more than {MAX_RANGE_LENGTH}")
    text = value.lower()
    if ":" not in text:
        number = member(text)
        return number, number
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"couldn't parse range {text}, invalid format")
    return member(parts[0]), member(parts[1])


def _weekday(text: str) -> int:
    try:
        return WEEKDAYS[text]
    except KeyError:
        raise ValueError(f"{_shown(text)} is not a valid weekday") from None


def _month(text: str) -> int:
    number = MONTHS.get(text)
    if number is None:
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"{_shown(text)} is not a valid month")
        number = int(text)
        if not 1 <= number <= 12:
            raise ValueError(f"{number} is not a valid month: out of range (1..12)")
    return number


def _integer(what: str) -> _Member:
    def member(text: str) -> int:
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"{_shown(text)} is not a valid {what}")
        number = int(text)
        if not -_INT64 <= number < _INT64:
            raise ValueError(f"{text} is not a valid {what}: out of range")
        return number

    return member


def _day_name(number: int) -> str:
    return next(name for name, value in WEEKDAYS.items() if value == number)


def _shown(text: str) -> str:
    """A value in a message as Alertmanager shows it (bare), or quoted when that would be unreadable."""
    return text if text and text.isprintable() and text.strip() == text else repr(text)

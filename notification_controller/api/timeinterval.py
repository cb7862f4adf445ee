"""Alertmanager's ``time_interval`` in camelCase: the entries of an Alert's ``spec.muteTimes`` and
``spec.activeTimes`` (issue 26 item 3).

The shape and the value syntax are Alertmanager's (``times``: ``HH:MM`` ranges, end exclusive, ``24:00``
allowed as an end; ``weekdays``: ``monday`` or ``monday:friday``; ``daysOfMonth``: ``1``, ``1:5``, negative
from the end of the month, ``-3:-1``; ``months``: ``january``, ``1:3``, ``may:august``; ``years``: ``2026``,
``2026:2027``; ``location``: an IANA zone, UTC by default). An entry matches an instant when every field it
gives matches (an empty entry matches always); a list matches when any entry does.

This module is the shape only (what the CRD and a manifest may say, bounded); what an entry means at an
instant is ``core/timeintervals.py``.
"""

from __future__ import annotations

from pydantic import Field
from pydantic.config import JsonDict

from .common import Model

MAX_TIME_INTERVALS = 32
"""Most entries in ``spec.muteTimes`` and in ``spec.activeTimes`` (each)."""
MAX_RANGES = 32
"""Most ranges in one field of an entry (``times``, ``weekdays``...)."""
MAX_RANGE_LENGTH = 32
"""Longest range string (``september:december`` is 18)."""

_RANGES: JsonDict = {"maxItems": MAX_RANGES, "items": {"type": "string", "maxLength": MAX_RANGE_LENGTH}}


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
        None, description="Times of day.", json_schema_extra={"maxItems": MAX_RANGES}
    )
    weekdays: list[str] | None = Field(
        None, description="Days of the week, e.g. 'monday:friday', 'saturday'.", json_schema_extra=_RANGES
    )
    days_of_month: list[str] | None = Field(
        None,
        description="Days of the month, e.g. '1:5', '-1' (the last day).",
        json_schema_extra=_RANGES,
    )
    months: list[str] | None = Field(
        None, description="Months, e.g. 'january:march', '12'.", json_schema_extra=_RANGES
    )
    years: list[str] | None = Field(None, description="Years, e.g. '2026:2027'.", json_schema_extra=_RANGES)
    location: str | None = Field(
        None,
        description="The IANA time zone the other fields are read in, e.g. 'Europe/Berlin' (default UTC).",
        json_schema_extra={"maxLength": 64},
    )

    def validation_errors(self, where: str) -> list[str]:
        """The syntax of every range (``core/timeintervals.py`` reads them); empty when valid.

        A placeholder until the parser lands: bounds only."""
        errors: list[str] = []
        for name in ("weekdays", "days_of_month", "months", "years"):
            values = getattr(self, name) or []
            if len(values) > MAX_RANGES:
                errors.append(f"{where}.{name} has more than {MAX_RANGES} ranges")
        return errors

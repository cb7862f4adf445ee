"""Time windows at run time (issue 26 item 3): what an Alert's ``spec.muteTimes`` / ``spec.activeTimes`` mean
at an instant, and when that next changes.

Semantics are Alertmanager's ``TimeInterval.ContainsTime`` (prometheus/alertmanager
``timeinterval/timeinterval.go``; its test vectors run in ``tests/unit/core/test_timeintervals.py``): the
instant is read as a wall clock in the entry's ``location`` (UTC by default); an entry matches when every
field it gives matches that wall clock (``times`` by the minute of the day, end exclusive; ``daysOfMonth``
with negative days counted from the end of *that* month and ranges clamped to it, exactly as Alertmanager
clamps them); a list matches when any entry does; an entry without fields matches always; an empty list
never matches. Because only the wall clock counts, a range that falls in a spring-forward gap does not match
that day, and one in a fall-back hour matches both times the hour is lived.

``next_change(intervals, at)`` is the first instant after ``at`` at which ``matches`` gives the other answer
(the stage that holds notifications schedules the end-of-window summary with it). It does not scan minute
by minute: it walks one UTC day at a time (days aligned on UTC midnight), turns each entry's ranges into
UTC intervals for the local days that day touches (split where the zone's offset changes, found by
bisection on ``utcoffset``), takes their union and reads the first edge after ``at``; while nothing can
match it jumps over whole months and years the ``months`` and ``years`` fields exclude. A day's union depends
only on each zone's offsets over it and on which entries match the local days it touches, so it is kept
under that key and most days cost the key. The work is bounded by the horizon (366 days at most) times the
size of an Alert's lists (32 entries of 32 ranges), and each compiled list remembers its last answer, so
asking again (on every held notification) costs a lookup, and a later ``at`` only looks at the days not
looked at yet.

Measured on the development machine (2 cores, Python 3.11; ``test_matches_is_cheap`` and
``test_the_worst_case_is_bounded`` time the same lists, with generous bounds for a loaded machine):
``matches`` costs about 1.2 µs for one or two entries in a named zone (6 µs for 30 entries of 32 ranges);
a first ``next_change`` (compiling included) about 0.09 ms for a business-hours window, 0.04 ms for
``years: ['2020']``, 1.2 ms for ``months: [december]`` seen from November, 15 ms for a window that never
ends (``00:00``-``24:00``: 366 days looked at) and 30 ms for the worst list there is (30 entries of 32
ranges in two zones whose union never ends but never merges within a zone: 2,000 intervals a day; 0.4 s
before days were kept by key). A list built so that every day has its own key as well (24 such entries
and 8 whose ``daysOfMonth`` and ``weekdays`` differ every day) still costs 0.25 s, once per version of the
Alert and per change: the cost an Alert's author can make the controller pay. A repeated ``next_change``
costs 3-8 µs. The plain alternative, a
minute-by-minute scan of a year, is 527,040 calls of ``matches`` (about 0.6 s); no Python library implements
Alertmanager's ``time_interval``. ``tests/unit/core/test_timeintervals.py`` checks every answer against a
minute-by-minute scan.

A list is compiled once (the ``parse_*`` functions of ``api/timeinterval.py``, bitmasks per field) and the
compiled form is cached by the list object itself and by its content (``_MAX_CACHED`` lists, each keeping
at most ``UNION_BUDGET`` ranges of per-day unions). An invalid list (one ``TimeInterval.validation_errors``
reports) raises ``ValueError``: the controller does not pass those on (the Alert is not Ready).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo

from ..api.timeinterval import (
    TimeInterval,
    load_location,
    parse_day_of_month_range,
    parse_month_range,
    parse_time_range,
    parse_weekday_range,
    parse_year_range,
)

__all__ = ["compiled", "matches", "next_change"]

_US = 1_000_000
_MINUTE = 60 * _US
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_LAST = datetime(9999, 12, 29, tzinfo=UTC)  # no window reaches past datetime.max in any zone
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_SAMPLES = 4  # a day's offset is sampled every 6 hours: two changes within 6 hours that cancel out are missed
# (none can be: no two transitions of any of the 599 zones of tzdata 2026 are within 6 hours, checked on
# their transition tables; each change found is located to the second by bisection)
_MAX_CACHED = 256
"""Compiled lists kept (by content, and by list object): an Alert has two lists."""
UNION_BUDGET = 2048
"""Ranges a compiled list keeps in its per-day unions (about 250 KB at most; a list of 32 entries with 32
ranges each has 1,024 ranges): past it, a day's union is merged again each time it is needed."""
MAX_DAY_KEYS = 64
"""Kinds of UTC day a compiled list keeps the answer for (about 1.5 KB each; a weekly window has about 10
kinds, counting the days the clocks change): past it, a new kind of day is worked out each time."""

Minutes = tuple[tuple[int, int], ...]


def matches(intervals: Sequence[TimeInterval], at: datetime) -> bool:
    """Whether any entry matches the instant ``at`` (aware); an empty list matches nothing."""
    return compiled(intervals).matches(at)


def next_change(
    intervals: Sequence[TimeInterval], at: datetime, horizon: timedelta = timedelta(days=366)
) -> datetime | None:
    """The first instant after ``at`` at which ``matches`` flips (in UTC, on a local minute boundary), or
    ``None`` when it does not flip by ``at + horizon``."""
    return compiled(intervals).next_change(at, horizon)


def compiled(intervals: Sequence[TimeInterval]) -> Compiled:
    """The compiled form of a list, cached by the list object (the Alert's own) and by its content."""
    hit = _BY_IDENTITY.get(id(intervals))
    if hit is not None and hit[0] is intervals:
        return hit[1]
    result = _compile(tuple(_key(interval) for interval in intervals))
    if len(_BY_IDENTITY) >= _MAX_CACHED:
        _BY_IDENTITY.clear()
    _BY_IDENTITY[id(intervals)] = (intervals, result)  # the reference keeps the id from being reused
    return result


_BY_IDENTITY: dict[int, tuple[Sequence[TimeInterval], Compiled]] = {}

_Key = tuple[
    tuple[tuple[str, str], ...] | None,
    tuple[str, ...] | None,
    tuple[str, ...] | None,
    tuple[str, ...] | None,
    tuple[str, ...] | None,
    str | None,
]


def _key(interval: TimeInterval) -> _Key:
    def strings(values: list[str] | None) -> tuple[str, ...] | None:
        return None if values is None else tuple(values)

    times = interval.times
    return (
        None if times is None else tuple((r.start_time, r.end_time) for r in times),
        strings(interval.weekdays),
        strings(interval.days_of_month),
        strings(interval.months),
        strings(interval.years),
        interval.location,
    )


@functools.lru_cache(maxsize=_MAX_CACHED)
def _compile(key: tuple[_Key, ...]) -> Compiled:
    entries: list[tuple[tzinfo, _Entry]] = [_entry(entry_key) for entry_key in key]
    if any(entry.always for _, entry in entries):
        return Compiled(always=True, zones=())
    by_zone: dict[tzinfo, list[_Entry]] = {}
    budget = [UNION_BUDGET]  # shared by the zones of one list
    for zone, entry in entries:
        by_zone.setdefault(zone, []).append(entry)
    return Compiled(
        always=False,
        zones=tuple(_Zone(zone, tuple(zone_entries), budget) for zone, zone_entries in by_zone.items()),
    )


def _entry(key: _Key) -> tuple[tzinfo, _Entry]:
    times, weekdays, days, months, years, location = key
    minutes = None if times is None else _merged([parse_time_range(start, end) for start, end in times])
    weekday_mask = None if weekdays is None else _mask(parse_weekday_range(v) for v in weekdays)
    month_mask = None if months is None else _mask(parse_month_range(v) for v in months)
    day_masks = None
    if days is not None:
        ranges = [parse_day_of_month_range(v) for v in days]
        day_masks = tuple(_day_mask(ranges, length) for length in range(32))
    year_ranges = None if years is None else tuple(parse_year_range(v) for v in years)
    return load_location(location), _Entry(minutes, weekday_mask, day_masks, month_mask, year_ranges)


def _mask(ranges: Iterable[tuple[int, int]]) -> int:
    mask = 0
    for begin, end in ranges:
        for number in range(begin, end + 1):
            mask |= 1 << number
    return mask


def _day_mask(ranges: Sequence[tuple[int, int]], length: int) -> int:
    """The days of a month of ``length`` days the ranges match, exactly as Alertmanager resolves them."""
    mask = 0
    if length < 28:
        return mask
    for begin, end in ranges:
        first = length + begin + 1 if begin < 0 else begin
        last = length + end + 1 if end < 0 else end
        if first > length:  # Alertmanager: a start after the end of this month matches nothing in it
            continue
        first = max(-length, min(first, length))
        last = max(-length, min(last, length))
        for day in range(max(first, 1), last + 1):
            mask |= 1 << day
    return mask


def _merged(ranges: Sequence[tuple[int, int]]) -> Minutes:
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return tuple(out)


def _next_midnight(instant: int) -> int:
    """The first UTC midnight after ``instant`` (µs since the epoch): the day windows are aligned on them."""
    return instant - instant % _DAY + _DAY


def _month_length(year: int, month: int) -> int:
    if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        return 29
    return _MONTH_DAYS[month]


@dataclass(frozen=True, slots=True)
class _Entry:
    minutes: Minutes | None
    weekdays: int | None
    days: tuple[int, ...] | None  # indexed by the month's length
    months: int | None
    years: tuple[tuple[int, int], ...] | None

    @property
    def always(self) -> bool:
        return (self.minutes, self.weekdays, self.days, self.months, self.years) == (None,) * 5

    def year_ok(self, year: int) -> bool:
        return self.years is None or any(begin <= year <= end for begin, end in self.years)

    def month_ok(self, month: int) -> bool:
        return self.months is None or bool(self.months >> month & 1)

    def day_ok(self, year: int, month: int, day: int, weekday: int) -> bool:
        """The date fields (``weekday``: Sunday 0)."""
        if self.weekdays is not None and not self.weekdays >> weekday & 1:
            return False
        if self.months is not None and not self.months >> month & 1:
            return False
        if self.days is not None and not self.days[_month_length(year, month)] >> day & 1:
            return False
        return self.year_ok(year)


_WHOLE_DAY: Minutes = ((0, 24 * 60),)


@dataclass(eq=False, slots=True)
class _Zone:
    """The entries read in one zone (most lists have one), and their union per set of matching entries."""

    zone: tzinfo
    entries: tuple[_Entry, ...]
    budget: list[int]  # ranges the list may still cache, shared by its zones
    _unions: dict[int, Minutes] = field(default_factory=dict)

    def offset(self, instant: int) -> int:
        """The zone's UTC offset at an instant (µs since the epoch), in µs."""
        offset = (_EPOCH + timedelta(microseconds=instant)).astimezone(self.zone).utcoffset()
        assert offset is not None  # an aware datetime's
        return offset // timedelta(microseconds=1)

    def pieces(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """``[start, end)`` (at most a day) cut where the offset changes: ``(from, to, offset)``."""
        if self.zone is UTC:
            return [(start, end, 0)]
        step = max((end - start) // _SAMPLES, 1)
        samples = [*range(start, end - 1, step), end - 1]
        offsets = [self.offset(sample) for sample in samples]
        out: list[tuple[int, int, int]] = []
        piece_start, piece_offset = start, offsets[0]
        for i in range(1, len(samples)):
            if offsets[i] != piece_offset:
                change = self._transition(samples[i - 1], samples[i], piece_offset)
                out.append((piece_start, change, piece_offset))
                piece_start, piece_offset = change, offsets[i]
        out.append((piece_start, end, piece_offset))
        return out

    def _transition(self, before: int, after: int, offset: int) -> int:
        """The first second in ``(before, after]`` whose offset is not ``offset`` (transitions are on whole
        seconds)."""
        low, high = before // _US, after // _US  # offset(low) == offset, offset(high) != offset
        if high * _US <= before:
            return after
        while high - low > 1:
            middle = (low + high) // 2
            if self.offset(middle * _US) == offset:
                low = middle
            else:
                high = middle
        return max(high * _US, before + 1)

    def active(self, day: int) -> int:
        """The entries (a bitmask) whose date fields match the local day ``day`` (days since 1970-01-01)."""
        when = date.fromordinal(_EPOCH_ORDINAL + day)
        year, month, dom = when.year, when.month, when.day
        weekday = when.isoweekday() % 7
        active = 0
        for i, entry in enumerate(self.entries):
            if entry.day_ok(year, month, dom, weekday):
                active |= 1 << i
        return active

    def minutes(self, active: int) -> Minutes:
        """The local minutes of a day at which one of the ``active`` entries matches."""
        if not active:
            return ()
        union = self._unions.get(active)
        if union is None:
            ranges: list[tuple[int, int]] = []
            for i, entry in enumerate(self.entries):
                if active >> i & 1:
                    ranges.extend(entry.minutes if entry.minutes is not None else _WHOLE_DAY)
            union = _merged(ranges)
            if len(union) <= self.budget[0]:
                self.budget[0] -= len(union)
                self._unions[active] = union
        return union

    def first_possible(self, instant: int) -> int | None:
        """An instant at or before the first local day from ``instant`` on whose year and month some entry
        allows (``instant`` itself when that is its own day), or ``None`` when there is none before year 10000."""
        local = (_EPOCH + timedelta(microseconds=instant)).astimezone(self.zone)
        year, month = local.year, local.month
        for _ in range(12 * 3 + 32 * 32):  # a month or a jump to a year range's start per step
            if year > 9998:
                return None
            allowed = [entry for entry in self.entries if entry.year_ok(year)]
            if not allowed:
                starts = [b for e in self.entries for b, _ in e.years or () if b > year]
                if not starts:
                    return None
                year, month = min(starts), 1
                continue
            if any(entry.month_ok(month) for entry in allowed):
                if (year, month) == (local.year, local.month):
                    return instant
                first = datetime(year, month, 1, tzinfo=self.zone) - timedelta(days=1)  # a day of margin
                return max(instant, (first - _EPOCH) // timedelta(microseconds=1))
            month += 1
            if month > 12:
                year, month = year + 1, 1
        return None  # pragma: no cover - the loop's bound is never reached within year 9998

    def matches(self, local: datetime) -> bool:
        """Whether an entry matches the wall clock ``local`` (in this zone)."""
        minute = local.hour * 60 + local.minute
        year, month, day = local.year, local.month, local.day
        weekday = local.isoweekday() % 7
        for entry in self.entries:
            if entry.minutes is not None:
                for start, end in entry.minutes:
                    if start <= minute < end:
                        break
                else:
                    continue
            if entry.day_ok(year, month, day, weekday):
                return True
        return False


@dataclass(eq=False, slots=True)
class Compiled:
    """A compiled ``muteTimes`` / ``activeTimes`` list: ``always`` when an entry has no fields.

    It remembers its last ``next_change`` answer (``_origin``, ``_checked``, ``_flip``: nothing flips in
    ``(_origin, _checked]``, and ``_flip``, when set, is the first flip after ``_origin``), so the stage may ask
    on every held notification: an instant inside the known stretch is answered at once, and a later horizon
    only looks at the days not looked at yet."""

    always: bool
    zones: tuple[_Zone, ...]
    _windows: dict[tuple[object, ...], tuple[tuple[int, int], ...]] = field(default_factory=dict)
    _origin: int = 0
    _checked: int = -1
    _flip: int | None = None

    def matches(self, at: datetime) -> bool:
        if self.always:
            return True
        if at.tzinfo is None:
            raise ValueError("a time interval is matched against an aware datetime")
        for zone in self.zones:  # noqa: SIM110 - a loop, not any(generator): this runs on every event
            if zone.matches(at.astimezone(zone.zone)):
                return True
        return False

    def next_change(self, at: datetime, horizon: timedelta = timedelta(days=366)) -> datetime | None:
        if at.tzinfo is None:
            raise ValueError("a time interval is matched against an aware datetime")
        if self.always or not self.zones or horizon <= timedelta(0) or at >= _LAST:
            return None
        start = (at - _EPOCH) // timedelta(microseconds=1)
        limit = (min(at + horizon, _LAST) - _EPOCH) // timedelta(microseconds=1)  # inclusive
        if self._origin <= start <= self._checked:
            if self._flip is not None:
                if start < self._flip:
                    return self._instant(self._flip) if self._flip <= limit else None
            elif limit <= self._checked:
                return None
            else:  # nothing flips up to _checked: go on from there
                flip = self._search(self._checked, limit)
                self._checked, self._flip = (limit if flip is None else flip), flip
                return None if flip is None else self._instant(flip)
        flip = self._search(start, limit)
        self._origin, self._checked, self._flip = start, (limit if flip is None else flip), flip
        return None if flip is None else self._instant(flip)

    def _search(self, start: int, limit: int) -> int | None:
        """The first instant in ``(start, limit]`` at which the answer flips (µs since the epoch)."""
        end = limit + 1
        window = self._window(start, min(_next_midnight(start), end))
        state = any(low <= start < high for low, high in window)
        point, window_start = start, start
        while True:
            window_end = min(_next_midnight(window_start), end)
            if state:
                cover = next(((low, high) for low, high in window if low <= point < high), None)
                if cover is None:
                    return point
                if cover[1] < window_end:
                    return cover[1]
            else:
                for low, high in window:
                    if high > point:
                        return max(low, point)
            if window_end >= end:
                return None
            point = window_start = window_end
            if not state:
                possible = [zone.first_possible(window_start) for zone in self.zones]
                if all(p is None for p in possible):
                    return None
                point = window_start = max(window_start, min(p for p in possible if p is not None))
                if window_start >= end:
                    return None
            window = self._window(window_start, min(_next_midnight(window_start), end))

    def _window(self, start: int, end: int) -> list[tuple[int, int]]:
        """The instants of ``[start, end)`` (within one UTC day) at which the list matches: sorted, disjoint,
        µs since the epoch. A whole UTC day's answer depends only on each zone's offsets over it and on which
        entries match the local days it touches, so it is kept under that key, relative to midnight: the next
        day like it (most days) costs the key."""
        plan = []  # per zone: its pieces (from, to, offset) and the matching entries of each local day
        for zone in self.zones:
            pieces = zone.pieces(start, end)
            first_day = min((low + offset) // _DAY for low, _, offset in pieces)
            last_day = max((high - 1 + offset) // _DAY for _, high, offset in pieces)
            days = tuple((day, zone.active(day)) for day in range(first_day, last_day + 1))
            plan.append((zone, pieces, days))
        midnight = start - start % _DAY
        key = None
        if start == midnight and end == midnight + _DAY:
            key = tuple(
                (
                    tuple((low - midnight, high - midnight, offset) for low, high, offset in pieces),
                    tuple((day - midnight // _DAY, active) for day, active in days),
                )
                for _, pieces, days in plan
            )
            kept = self._windows.get(key)
            if kept is not None:
                return [(begin + midnight, finish + midnight) for begin, finish in kept]
        found: list[tuple[int, int]] = []
        for zone, pieces, days in plan:
            actives = dict(days)
            for low, high, offset in pieces:
                for day in range((low + offset) // _DAY, (high - 1 + offset) // _DAY + 1):
                    local_midnight = day * _DAY - offset  # the instant the wall clock reads 00:00 of `day`
                    for first, last in zone.minutes(actives[day]):
                        begin = max(local_midnight + first * _MINUTE, low)
                        finish = min(local_midnight + last * _MINUTE, high)
                        if begin < finish:
                            found.append((begin, finish))
        found.sort()
        union: list[tuple[int, int]] = []
        for begin, finish in found:
            if union and begin <= union[-1][1]:
                if finish > union[-1][1]:
                    union[-1] = (union[-1][0], finish)
            else:
                union.append((begin, finish))
        budget = self.zones[0].budget
        if key is not None and len(self._windows) < MAX_DAY_KEYS and len(union) <= budget[0]:
            budget[0] -= len(union)
            self._windows[key] = tuple((begin - midnight, finish - midnight) for begin, finish in union)
        return union

    @staticmethod
    def _instant(micros: int) -> datetime:
        return _EPOCH + timedelta(microseconds=micros)

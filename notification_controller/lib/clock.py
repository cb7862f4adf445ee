"""Time, injected. Logic takes a ``Clock`` so tests can move time without sleeping."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going backwards."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock for tests: starts at ``start`` and only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        from datetime import timedelta

        self._now += timedelta(seconds=seconds)
        self._mono += seconds


def rfc3339(moment: datetime) -> str:
    """``2006-01-02T15:04:05Z`` (UTC, seconds precision) as metav1.Time serialises. The year is written
    with four digits (``0001``): glibc's ``%Y`` drops the leading zeros."""
    text = _rfc3339_recent.get(moment)
    if text is None:
        t = moment.astimezone(UTC)
        text = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"
        if len(_rfc3339_recent) >= 64:
            _rfc3339_recent.clear()
        _rfc3339_recent[moment] = text
    return text


# The events of a burst share their timestamps, and every delivery writes the event's (issue 17): the last
# few texts are remembered. Keyed by the aware datetime (equal instants in any offset give the same text).
_rfc3339_recent: dict[datetime, str] = {}


def go_time_string(moment: datetime, monotonic: float) -> str:
    """Go's ``time.Now().String()``, as Flux writes into ``reconcile.fluxcd.io/requestedAt`` (§5.4)."""
    t = moment.astimezone(UTC)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}."
        f"{t.microsecond * 1000:09d} +0000 UTC m=+{monotonic:.9f}"
    )

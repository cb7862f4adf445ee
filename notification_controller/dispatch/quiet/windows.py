"""The mute-window stage (pre-queue, after the silence stage): an Alert's ``spec.muteTimes`` (Alertmanager's
``mute_time_intervals``) and ``spec.activeTimes`` (``active_time_intervals``) hold its notifications while
any mute entry matches the instant, or while no active entry does (``Suppressed.MUTED``). What an entry
means is ``core/timeintervals.py``; the time is the injected clock's. Held notifications are counted
(``held.py``) and summarised once when the window ends (``summary.py``); docs/silences.md.

An Alert without the fields costs two attribute checks (it takes the old path exactly). For one with them,
whether it is muted is constant between two changes of the intervals, so the answer is kept per Alert with
the span it holds for (``Span``): one comparison per notification until the span ends, then one evaluation
of the intervals and of ``next_change`` (bounded by ``MAX_STEPS`` look-aheads).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ...api.alert import Alert, AlertSpec
from ...core import timeintervals
from ...core.noise import Suppressed
from ...errors import StoreError
from ...objects.base import Change
from ..model import Draft, Drop
from .held import MUTE
from .shared import QuietState, alert_id

log = logging.getLogger(__package__)

MAX_STEPS = 16
"""Look-aheads when the mute and active lists change at different instants (the end of a muted span)."""
HORIZON = timedelta(days=366)
"""A span that does not end within this is treated as ending then (``next_change``'s horizon)."""

Schedule = Callable[[str, float], None]
"""``schedule(alert id, when)``: the summary of the Alert's mute window is due ``when`` (``summary.py``)."""


def muted_by(spec: AlertSpec, at: datetime) -> str:
    """What mutes the Alert at ``at``: ``spec.muteTimes[i]``, ``outside spec.activeTimes``, or ''."""
    for i, entry in enumerate(spec.mute_times or ()):
        if timeintervals.matches([entry], at):
            return f"spec.muteTimes[{i}]"
    if spec.active_times and not timeintervals.matches(spec.active_times, at):
        return "outside spec.activeTimes"
    return ""


def span_end(spec: AlertSpec, at: datetime, muted: bool) -> datetime:
    """The first instant after ``at`` at which the Alert's muted state is no longer ``muted``."""
    t = at
    for _ in range(MAX_STEPS):
        changes = [
            c
            for intervals in (spec.mute_times, spec.active_times)
            if intervals
            for c in (timeintervals.next_change(intervals, t, HORIZON),)
            if c is not None
        ]
        if not changes:
            return at + HORIZON
        t = min(changes)
        if bool(muted_by(spec, t)) != muted:
            return t
    return t


@dataclass(frozen=True, slots=True)
class Span:
    """The Alert's muted state over ``[start, end)`` for one version of its spec."""

    spec: AlertSpec
    start: float
    end: float
    why: str  # '' when not muted

    def describe(self) -> str:
        until = datetime.fromtimestamp(self.end, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"muted by {self.why} until {until}"

    @property
    def label(self) -> str:
        return "spec.activeTimes" if self.why.startswith("outside") else "spec.muteTimes"


class Windows:
    """The pre-queue stage (the module docstring)."""

    name = "quiet-window"

    def __init__(self, core: QuietState, schedule: Schedule) -> None:
        self.core = core
        self.schedule = schedule
        self._spans: dict[str, Span] = {}
        core.objects.subscribe(self._changed)

    def _changed(self, change: Change) -> None:
        if change.kind == "Alert" and change.obj is None:
            self._spans.pop(f"{change.namespace}/{change.name}", None)

    def __call__(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        spec = draft.alert.spec
        if not spec.mute_times and not spec.active_times:
            return draft
        span = self.span(draft.alert, self.core.clock.now())
        if span is None or not span.why:
            return draft
        return self._hold(draft, span)

    def span(self, alert: Alert, now: datetime) -> Span | None:
        """The Alert's muted span at ``now`` (kept until it ends or the spec changes); None when its
        intervals cannot be read (the Alert's status says why: it holds nothing)."""
        key = alert_id(alert)
        at = now.timestamp()
        span = self._spans.get(key)
        if span is not None and span.spec is alert.spec and span.start <= at < span.end:
            return span
        try:
            why = muted_by(alert.spec, now)
            end = span_end(alert.spec, now, bool(why))
        except ValueError as exc:
            log.debug("alert %s: time intervals not usable: %s", key, exc)
            return None
        span = Span(alert.spec, at, end.timestamp(), why)
        self._spans[key] = span
        return span

    async def _hold(self, draft: Draft, span: Span) -> Draft | Drop:
        alert = draft.alert
        key = alert_id(alert)
        try:
            await self.core.held.record(key, MUTE, span.label, span.end, draft.event, self.core.now())
        except StoreError as exc:
            self.core.store_failed("window", exc)
            return draft
        self.schedule(key, span.end)
        self.core.held_for(alert)
        return Drop(
            Suppressed.MUTED,
            f"{draft.event.involved_object.describe()}: {span.describe()}",
            suppressed=True,
        )

"""Building records from what the pipeline sees (``Recorder``), so every caller says one thing: which
decision, about which event, for which Alert.

The pipeline's pieces call it where they already count the outcome (``dispatch/report.py``'s ``Reporter``,
the event server); the ``Recorder`` turns an ``Event`` and a few strings into a ``Record``: object,
severity and reason from the event, the message and every free text masked by the ``Redactor`` (as log
lines are) and cut to ``model.MAX_TEXT``.

Cost (issue 27: recording costs at most 10 % of the CPU per event): an event decided for N Alerts is masked
once, not N times (the last event's masked fields are kept), and a record is a slotted dataclass appended
to the backend's buffer; ``bench/`` measures the whole with the recorder on and off.

Masking is most of a record's cost once the store holds Secrets: the ``Redactor`` looks at every token of a
text (measured: ~6 µs for a 52-character Flux message with two Secrets loaded, a record 14 µs in all). The
texts repeat — an object's ``Kind/namespace/name``, the reasons, most messages — so the masked form of texts
up to ``MEMO_TEXT`` characters is kept (at most ``MEMO_SIZE`` of them, dropped together when full) for as
long as the Redactor's values do not change (``Redactor.version``): a repeated text costs a dict lookup
(the same record: 3.5 µs). While the Redactor holds no value at all (``Redactor.empty``: local mode without
Secrets, the bench) a text is only cut, with no memo: the memo's lookups and inserts were most of what
recording a unique message cost (callgrind, 10,000 distinct no-match events: 25.0k → 16.8k instructions a
record; the server's 253.6k → 246.9k an event, against 227.2k with the history off).

With no value held, a record's ``detail`` and ``request`` are only cut too (no memo lookup, no ``mask``
call). The frequent records (a no-match event's: ``unmatched``; a delivered notification's) are made by
``put`` with every field in place, and no record carries a float time (``model.Row``). Callgrind, in one run (1,600 no-match
events on 16 connections; 1,500 delivered notifications on one): a no-match event 237.2k → 235.5k
instructions (218.6k with the history off: 1.085 → 1.077 ×; 232.5k while ``unmatched`` had its own copy of
``put``'s body, within callgrind's ~1 % between runs), a delivered notification 713.9k → 702.4k–704.8k
(666.4k off: 1.071 → 1.054–1.058 ×). An A/B on the wall clock could not tell these apart: two sets of 4 processes
of the very same build, measured in turn against one set with the history off, read 1.089 and 1.135 ×.

What recording costs on the wall clock is more than its instructions say. Before the changes above, at
1.06–1.09 × the instructions, a no-match event took 1.06–1.21 × the CPU (three runs of ``make bench``, 3
processes per variant: ``across_processes``); timers inside one process put 2.1–2.5 µs in ``record`` itself
and ~4.5 µs more in ``Dispatcher.admit`` in all. Callgrind's cache simulation counts ~260 more first-level
instruction misses and ~12 more last-level write misses per event: code and memory the rest of the path does
not touch. After the changes above: ~5.5 µs more user CPU per event than with the history off (~31 µs), and
4.3 µs with a ring of 10 records (4 processes each, one run: within its noise), 1.11–1.14 × in three runs of
``make bench``. Batching the records per turn of the event loop did not lower it (1.21 × against
1.15–1.19 × without, measured the same way), so it was not kept.

Refusals are what an unauthenticated client controls most cheaply (a flood of bad POSTs would push every
useful record out of the ring): they are recorded at most ``REFUSED_RATE`` a second with a burst of
``REFUSED_BURST``; the rest is counted in ``notification_history_dropped_total`` and
``notification_events_rejected_total`` as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..api.event import Event
from ..core.redact import MIN_LEN, Redactor
from ..lib.tokenbucket import Bucket
from ..metrics import HistoryMetrics
from .model import CUT, MAX_TEXT, OUTCOME_VALUES, History, Outcome, cut, next_ns

REFUSED_RATE = 10.0
REFUSED_BURST = 100
MEMO_SIZE = 4096
"""Masked texts kept (see the module docstring): at most ``MEMO_SIZE × MEMO_TEXT`` characters, ~1 MiB."""
MEMO_TEXT = 256


class Recorder:
    """Makes ``Record`` s and hands them to a ``History`` (see the module docstring)."""

    __slots__ = (
        "_bucket",
        "_last",
        "_memo",
        "_memo_version",
        "_put",
        "history",
        "metrics",
        "monotonic",
        "redactor",
    )

    def __init__(
        self,
        history: History,
        redactor: Redactor,
        metrics: HistoryMetrics | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.history = history
        self._put = history.record_row
        self.redactor = redactor
        self.metrics = metrics
        self._last: tuple[Event | None, tuple[str, str, str, str]] = (None, ("", "", "", ""))
        self.monotonic = monotonic
        self._bucket = Bucket(REFUSED_RATE, REFUSED_BURST, monotonic())
        self._memo: dict[str, str] = {}
        self._memo_version = redactor.version

    def mask(self, text: str) -> str:
        """``text`` masked and cut to ``MAX_TEXT`` (cut first: a 3 MiB message is not scanned whole)."""
        size = len(text)
        if size < MIN_LEN:  # the Redactor masks nothing shorter (core/redact.py): skip the call
            return text
        if self.redactor.empty:  # no value held: nothing to mask, nothing to remember
            return text if size <= MAX_TEXT else cut(text)
        if size > MAX_TEXT:
            return self.redactor(text[: MAX_TEXT * 2])[: MAX_TEXT - len(CUT)] + CUT
        if size > MEMO_TEXT:
            return self.redactor(text)
        memo = self._memo
        if self._memo_version != self.redactor.version:  # a Secret changed: what was masked may differ
            memo.clear()
            self._memo_version = self.redactor.version
        masked = memo.get(text)
        if masked is None:
            masked = self.redactor(text)
            if len(memo) >= MEMO_SIZE:
                memo.clear()
            memo[text] = masked
        return masked

    def _event_fields(self, event: Event) -> tuple[str, str, str, str]:
        """(object, severity, reason, message) of ``event``, masked (``put`` keeps them as the last event's)."""
        obj = event.involved_object
        kind, name = obj.kind, obj.name
        key = f"{kind}/{obj.namespace}/{name}" if kind or name else ""
        severity, reason, message = event.severity, event.reason, event.message
        if self.redactor.empty:  # nothing to mask (local mode without Secrets): only the cut, no memo
            fields = (
                key if len(key) <= MAX_TEXT else cut(key),
                severity if len(severity) <= MAX_TEXT else cut(severity),
                reason if len(reason) <= MAX_TEXT else cut(reason),
                message if len(message) <= MAX_TEXT else cut(message),
            )
            return fields
        memo = self._memo
        if self._memo_version != self.redactor.version:  # a Secret changed: what was masked may differ
            memo.clear()
            self._memo_version = self.redactor.version
        # the memo's lookups inline (``mask`` for what it does not hold): a call per field was a tenth of a
        # record's cost; object keys and reasons are short and repeat, a severity is shorter than any value
        # the Redactor masks
        get, mask = memo.get, self.mask
        fields = (
            get(key) or mask(key),
            severity if len(severity) < MIN_LEN else mask(severity),
            get(reason) or mask(reason),
            get(message) or mask(message),
        )
        return fields

    def record(
        self,
        outcome: Outcome,
        event: Event | None,
        event_id: str,
        *,
        notification_id: str = "",
        alert: str = "",
        provider: str = "",
        provider_type: str = "",
        stage: str = "",
        detail: str = "",
        attempt: int = 0,
        latency_ms: float | None = None,
        status_code: int | None = None,
        request: str = "",
    ) -> None:
        """One decision. Never raises: the pipeline must go on whatever the history does."""
        self.put(
            outcome, event, event_id, notification_id, alert, provider, provider_type, stage, detail, attempt,
            latency_ms, status_code, request,
        )  # fmt: skip

    def put(
        self,
        outcome: Outcome,
        event: Event | None,
        event_id: str,
        notification_id: str,
        alert: str,
        provider: str,
        provider_type: str,
        stage: str,
        detail: str,
        attempt: int,
        latency_ms: float | None,
        status_code: int | None,
        request: str,
        /,
    ) -> None:
        """``record`` with every field in place, for the pipeline's frequent records (a no-match event's,
        a delivered notification's: ``dispatch/recording``). Keyword binding (``initialize_locals``) on the
        delivery path with the history on took 1,876 instructions a notification, 455 since. Never raises.

        The record goes to the history as a ``Record.row`` tuple made here, with no ``Record`` in between
        (see the module docstring for what that saved)."""
        try:
            last = self._last
            if event is last[0]:
                obj, severity, reason, message = last[1]
            elif event is None:
                obj = severity = reason = message = ""
            else:
                fields = self._event_fields(event)
                self._last = (event, fields)
                obj, severity, reason, message = fields
            if self.redactor.empty:  # nothing to mask: only the cut (``mask`` would say the same, in a call)
                if len(detail) > MAX_TEXT:
                    detail = cut(detail)
                if len(request) > MAX_TEXT:
                    request = cut(request)
            else:
                if detail:
                    detail = self._memo.get(detail) or self.mask(detail)
                if request:
                    request = self.mask(request)
            self._put(
                (
                    next_ns(), None, event_id, notification_id, obj, severity, reason, message, alert, provider,
                    provider_type, OUTCOME_VALUES[outcome], stage, detail, attempt, latency_ms, status_code,
                    request,
                )
            )  # fmt: skip
        except Exception:  # a bug here must not fail a POST or a delivery: counted instead
            if self.metrics is not None:
                self.metrics.dropped.inc()

    def unmatched(self, event: Event, event_id: str, detail: str) -> None:
        """No Alert matched ``event`` (``detail``: why): the most frequent record of all, ``put`` with the
        fields of an event-level record. Never raises, like ``record``."""
        self.put(Outcome.UNMATCHED, event, event_id, "", "", "", "", "", detail, 0, None, None, "")

    def refused(self, event: Event | None, event_id: str, status: int, reason: str, detail: str = "") -> None:
        """The event server refused a POST with ``status`` (``reason``: the label of
        ``notification_events_rejected_total``): recorded within the refusal budget."""
        if self._bucket.take(self.monotonic()) is not None:
            if self.metrics is not None:
                self.metrics.dropped.inc()
            return
        self.record(Outcome.REFUSED, event, event_id, stage=reason, detail=detail, status_code=status)

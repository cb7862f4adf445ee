"""One decision of the pipeline about one event, in one vocabulary, and the protocol of where decisions go.

"Nothing arrived and I cannot tell why" (issue 27): counters and log lines say *that* something was
dropped, never *which* event, for *which* Alert, *why*. A ``Record`` says it, once per decision: for every
event, per candidate Alert, what became of it (``Outcome``), which stage or rule decided (``stage``), the
reason text (``detail``), and for attempts the Provider's answer (``status_code``, ``latency_ms``) and the
masked request summary. Every text in a record is masked (``core.redact.Redactor``) and cut to
``MAX_TEXT`` before it is built: a record can be shown to anyone who may read the UI.

``History`` is what the pipeline writes to and the CLI/UI read from: ``record`` is synchronous and never
blocks (a backend buffers; a full buffer drops the record and counts it), ``query`` answers newest first,
``subscribe`` is the live tail. The backends (``memory``, ``sqlite``, ``nats``) sit next to this module.
"""

from __future__ import annotations

import enum
import os
import time as _time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

MAX_TEXT = 1024
"""Longest message or detail kept in a record (characters); longer texts are cut and end in ``CUT``."""

CUT = "..."
"""ASCII: one non-ASCII character would make Python store the whole 1 KiB text at two bytes a character."""

MAX_LIMIT = 1000
"""Most records one query answers."""


class Outcome(enum.StrEnum):
    """The one vocabulary of decisions (the JSON value is the string)."""

    DELIVERED = "delivered"  # the provider accepted it (attempt N)
    RETRYING = "retrying"  # an attempt failed; another will follow (detail: why)
    FAILED = "failed"  # an attempt failed and no other follows (memory store gave up)
    DEAD_LETTERED = "dead_lettered"  # a durable store gave up (max age, permanent refusal)
    SUPPRESSED = "suppressed"  # noise control / quiet held it (stage: filter, threshold, silence...)
    DROPPED = "dropped"  # a Flux rule or a limit dropped it (stage: the DropReason value)
    UNMATCHED = "unmatched"  # no Alert matched the event (one record per event, alert "")
    DUPLICATE = "duplicate"  # Flux's duplicate limiter answered 429 (one record per event)
    REFUSED = "refused"  # the event server refused the POST (400/413/...; object may be "")


OUTCOMES = frozenset(o.value for o in Outcome)
OUTCOME_VALUES: Mapping[Outcome, str] = {o: o.value for o in Outcome}
"""The plain string of each outcome, for rows: ``Outcome.X.value`` is two Python-level calls (the enum's
descriptor), a dict lookup is none, and a row holding the member itself would stay tracked by the garbage
collector (the member is a tracked object; a row of strings and numbers is not)."""


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters (the last ones ``CUT`` when cut)."""
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


_SUFFIX = os.urandom(2).hex()  # 4 hex characters: this process
_last_ns = 0


def new_record_id(time_ns: int | None = None) -> str:
    """A unique id that sorts by time: 20 digits of nanoseconds, then 4 hex characters of this process.
    Within one process ids are strictly increasing (a tie moves the clock on by one nanosecond)."""
    return record_id(next_ns(time_ns))


def next_ns(time_ns: int | None = None) -> int:
    """Nanoseconds since the epoch, now (``time_ns``), strictly increasing within this process: what a
    record's id is made of (``record_id``)."""
    global _last_ns
    ns = _time.time_ns() if time_ns is None else time_ns
    if ns <= _last_ns:
        ns = _last_ns + 1
    _last_ns = ns
    return ns


def record_id(ns: int) -> str:
    """The id of the record made at ``ns`` (``next_ns``)."""
    return f"{ns:020d}{_SUFFIX}"


def stamp(time_ns: int | None = None) -> tuple[str, float]:
    """``(id, epoch seconds)`` of a record made now (``time_ns``): one clock reading for both."""
    ns = next_ns(time_ns)
    return record_id(ns), ns / 1e9


def rfc3339_ms(epoch: float) -> str:
    """``2026-11-27T10:47:05.123Z``."""
    t = datetime.fromtimestamp(epoch, UTC)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}.{t.microsecond // 1000:03d}Z"


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of an RFC 3339 time (``Z`` or an offset). Raises ``ValueError``."""
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


Row = tuple[
    int | str,
    float | None,
    str,
    str,
    str,
    str,
    str,
    str,
    str,
    str,
    str,
    str,
    str,
    str,
    int,
    float | None,
    int | None,
    str,
]
"""``Record.row``: the fields in order, the outcome as its string. The id may be left as the ``next_ns``
it is made of (the ``Recorder``'s rows: ``record_id`` formats it when the row is read, not on the
pipeline's path — formatting was a fifth of a record's cost), and then the time as ``None``: it is that
``next_ns`` in seconds (``row_time``). Dividing the nanoseconds on the pipeline's path made a float per
record (a big integer's true division and the float's allocation: ~2,000 instructions an event, callgrind)."""

# indexes of the fields a query filters on, in a Row
_TIME: Final = 1
_EVENT: Final = 2
_NOTIFICATION: Final = 3
_OBJECT: Final = 4
_ALERT: Final = 8
_PROVIDER: Final = 9
_OUTCOME: Final = 11


def row_time(row: Row) -> float:
    """A row's epoch seconds (``Row``: a recorder's row leaves them to its id's nanoseconds)."""
    t = row[_TIME]
    return t if t is not None else int(row[0]) / 1e9


@dataclass(slots=True)
class Record:
    """One decision (see the module docstring). Texts are already masked and cut. Never changed once made;
    not ``frozen``: a frozen dataclass's ``__init__`` sets each of the 18 fields through
    ``object.__setattr__`` (2.0 µs against 0.3 µs, measured), a fifth of the recorder's budget per event."""

    id: str
    time: float  # epoch seconds
    event_id: str  # one id per received event: all its records share it
    notification_id: str  # Notification.id ("" for event-level records)
    object: str  # "Kustomization/flux-system/apps" ("" when unknown)
    severity: str
    reason: str
    message: str
    alert: str  # "namespace/name" or ""
    provider: str  # "namespace/name" or ""
    provider_type: str
    outcome: Outcome
    stage: str = ""  # which stage or rule decided ("" for delivered)
    detail: str = ""  # the reason text
    attempt: int = 0  # 0 for decisions before sending
    latency_ms: float | None = None
    status_code: int | None = None
    request: str = ""  # "POST https://hooks.slack.com/*** (1,234 B)" ("" before sending)

    def row(self) -> Row:
        """The record as a tuple of strings and numbers (``from_row`` reverses it). What the backends keep:
        the garbage collector stops tracking such a tuple at its first pass, so a full ring adds nothing to
        the collector's work, where 10,000 live Records (each tracked) doubled what recording cost per event
        (measured, issue 27: 10 µs against 5 µs with the collector off)."""
        return (
            self.id, self.time, self.event_id, self.notification_id, self.object, self.severity, self.reason,
            self.message, self.alert, self.provider, self.provider_type, self.outcome.value, self.stage,
            self.detail, self.attempt, self.latency_ms, self.status_code, self.request,
        )  # fmt: skip

    @classmethod
    def from_row(cls, row: Row) -> Record:
        ident = row[0]
        return cls(
            ident if isinstance(ident, str) else record_id(ident),
            row_time(row),
            *row[2:11],
            Outcome(row[11]),
            *row[12:],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": rfc3339_ms(self.time),
            "eventId": self.event_id,
            "notificationId": self.notification_id,
            "object": self.object,
            "severity": self.severity,
            "reason": self.reason,
            "message": self.message,
            "alert": self.alert,
            "provider": self.provider,
            "providerType": self.provider_type,
            "outcome": self.outcome.value,
            "stage": self.stage,
            "detail": self.detail,
            "attempt": self.attempt,
            "latencyMs": self.latency_ms,
            "statusCode": self.status_code,
            "request": self.request,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Record:
        """The inverse of ``to_json``. Raises ``ValueError`` (naming the field) for what it cannot read."""
        try:
            outcome = Outcome(raw["outcome"])
        except (KeyError, ValueError):
            raise ValueError(f"outcome: not one of {', '.join(sorted(OUTCOMES))}") from None
        try:
            when = raw["time"]
            t = float(when) if isinstance(when, int | float) else parse_rfc3339(str(when))
        except (KeyError, ValueError, TypeError):
            raise ValueError("time: not an RFC 3339 time") from None

        def text(key: str) -> str:
            value = raw.get(key, "")
            if not isinstance(value, str):
                raise ValueError(f"{key}: not a string")
            return value

        def optional(key: str, kind: type[int] | type[float]) -> Any:
            value = raw.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{key}: not a number")
            return kind(value)

        attempt = raw.get("attempt", 0)
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            raise ValueError("attempt: not an integer")
        return cls(
            id=text("id"),
            time=t,
            event_id=text("eventId"),
            notification_id=text("notificationId"),
            object=text("object"),
            severity=text("severity"),
            reason=text("reason"),
            message=text("message"),
            alert=text("alert"),
            provider=text("provider"),
            provider_type=text("providerType"),
            outcome=outcome,
            stage=text("stage"),
            detail=text("detail"),
            attempt=attempt,
            latency_ms=optional("latencyMs", float),
            status_code=optional("statusCode", int),
            request=text("request"),
        )


@dataclass(frozen=True)
class Query:
    """Which records: exact matches on the fields that are set ("" = any), a time range, newest first."""

    object: str = ""
    alert: str = ""
    provider: str = ""
    outcome: str = ""
    event_id: str = ""
    notification_id: str = ""
    since: float | None = None  # epoch seconds, inclusive
    until: float | None = None  # epoch seconds, inclusive
    limit: int = 100  # at most MAX_LIMIT

    def __post_init__(self) -> None:
        if self.outcome and self.outcome not in OUTCOMES:
            raise ValueError(f"outcome: {self.outcome!r} is not one of {', '.join(sorted(OUTCOMES))}")
        if self.limit < 1:
            raise ValueError("limit: must be at least 1")

    @property
    def bounded_limit(self) -> int:
        return min(self.limit, MAX_LIMIT)

    def matches_row(self, row: Row) -> bool:
        """``matches`` on a ``Record.row``, without making the Record."""
        return (
            (not self.object or row[_OBJECT] == self.object)
            and (not self.alert or row[_ALERT] == self.alert)
            and (not self.provider or row[_PROVIDER] == self.provider)
            and (not self.outcome or row[_OUTCOME] == self.outcome)
            and (not self.event_id or row[_EVENT] == self.event_id)
            and (not self.notification_id or row[_NOTIFICATION] == self.notification_id)
            and (self.since is None or row_time(row) >= self.since)
            and (self.until is None or row_time(row) <= self.until)
        )

    def matches(self, r: Record) -> bool:
        return (
            (not self.object or r.object == self.object)
            and (not self.alert or r.alert == self.alert)
            and (not self.provider or r.provider == self.provider)
            and (not self.outcome or r.outcome == self.outcome)
            and (not self.event_id or r.event_id == self.event_id)
            and (not self.notification_id or r.notification_id == self.notification_id)
            and (self.since is None or r.time >= self.since)
            and (self.until is None or r.time <= self.until)
        )


class History(Protocol):
    """Where the pipeline's decisions go and where the CLI and the UI read them (see the module docstring)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def record(self, r: Record, /) -> None:
        """Keep ``r``; never blocks, never raises (a full buffer drops it and counts). Same as
        ``record_row(r.row())``."""

    def record_row(self, row: Row, /) -> None:
        """Keep the record ``row`` (``Record.row``): what the ``Recorder`` calls, without making a ``Record``
        (the pipeline's path: see recorder.py). Never blocks, never raises."""

    async def query(self, q: Query, /) -> list[Record]:
        """The records ``q`` selects, newest first, at most ``q.bounded_limit``."""
        ...

    def subscribe(self) -> AsyncIterator[Record]:
        """Records as they are recorded from now on (a slow subscriber misses records, never blocks)."""
        ...

"""Noise control's decisions, as pure functions over plain, serialisable state (docs/noise-control.md).

The stages that apply them (``dispatch/noise/``) keep the state in the store's KV (``--store``): in
memory per process by default, in SQLite across restarts, in NATS JetStream across replicas. Here there is
no I/O and no clock: time comes in as epoch seconds, state goes out as bytes.

Order of the stages, each optional (an Alert without the fields skips them all):

1. **filter** (``spec.filter``, CEL over ``event``): false → suppressed (``filter``);
2. **threshold** (``spec.threshold``): the events of one involved object are counted in a sliding window
   of ``within``; the ``count``-th notifies (saying how many) and restarts the count (Alertmanager-like:
   at most one notification per full window of events), the others are suppressed (``threshold``);
3. **state change** (``spec.notifyOn: StateChange``): an object's notified severity is remembered; an
   event notifies only when its severity (``error``, or anything else counted as healthy) differs from the
   last one notified, so the first error and the recovery go out; an object never notified counts as
   healthy (the first info is suppressed, the first error is sent) (``state``);
4. **repeat** (``spec.repeatInterval``): an identical notification (same object, severity, reason, and
   message once durations and other volatile numbers are masked: ``normalise_message``) is sent at most
   once per interval (``repeat``);
5. **group** (``spec.groupBy``): Alertmanager's grouping. The first event of a new group waits
   ``groupWait``; everything that arrives meanwhile joins it and goes out as one notification; events that
   join afterwards go out together ``groupInterval`` after the previous notification. A group with nothing
   new for ``groupInterval`` after its last notification ends (``grouped``).

Every state is bounded: a threshold keeps at most ``count`` arrival times, a group at most
``MAX_GROUP_SAMPLES`` sample lines and ``MAX_GROUP_OBJECTS`` object names whatever the flood. The stages
bound how many states there are (keys per Alert, groups per Alert) and give each a TTL (issue 23 item 5).

Values are small and exactly sized: arrivals and object states are packed with ``struct`` (a version
byte first; the JSON written by earlier versions still reads), groups are JSON copied out of orjson's
buffer — orjson returns its bytes with the 4 KiB it allocated for them, and a store that keeps 200,000 of
them kept 800 MB of slack (measured with ``tracemalloc``: 4,089 bytes per 21-byte arrival list).
"""

from __future__ import annotations

import enum
import hashlib
import re
import struct
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ..api.event import SEVERITY_ERROR, Event
from ..lib.duration import format_duration

MAX_GROUP_SAMPLES = 5
"""Messages quoted in a group's notification (the rest are counted)."""
MAX_GROUP_OBJECTS = 20
"""Distinct object names listed in a group's notification (the rest are counted)."""
MAX_SAMPLE_LENGTH = 200
"""Characters of a sample message kept (first line only)."""
MAX_LABEL_LENGTH = 128
OCCURRENCES = "occurrences"
"""Metadata key (and message field) saying how many events a threshold or a group notification stands for."""
RECOVERED_FROM = "recoveredFrom"
"""Metadata key (and message field) of a recovery: the error it recovered from."""


class Suppressed(enum.StrEnum):
    """Why a matched event did not notify: labels ``notification_suppressed_total{reason}``."""

    FILTER = "filter"
    THRESHOLD = "threshold"
    STATE = "state"
    REPEAT = "repeat"
    GROUPED = "grouped"
    SILENCED = "silenced"  # a Silence matched (docs/silences.md)
    MUTED = "muted"  # the Alert's muteTimes / outside its activeTimes
    INHIBITED = "inhibited"  # a failing source or dependency (inhibitDependents, inhibitRules)


# ---- identity ----------------------------------------------------------------------------------------------
# Go durations (2.08s, 1m2.3s, 10m0s, 500ms, 1.5µs) and bare decimals with a unit-less fraction.
_DURATION = re.compile(
    r"\b\d+(?:\.\d+)?(?:h|m(?!s)|s|ms|us|µs|ns)(?:\d+(?:\.\d+)?(?:h|m(?!s)|s|ms|us|µs|ns))*\b"
)
# Timestamps (RFC 3339) and long hex runs (pod hashes, request ids) vary between identical failures too.
_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")
_VOLATILE_HEX = re.compile(r"\b[0-9a-f]{12,}\b")


def normalise_message(message: str) -> str:
    """The message with what varies between identical failures masked: durations ("in 2.08s", "next run
    in 10m0s"), timestamps and long hex ids. Revisions written ``main@sha1:<hex>`` keep the branch but not
    the digest only when the digest is 12+ hex characters long — a new revision with the same text is
    considered the same notification (its revision metadata is not part of the identity either)."""
    text = _TIMESTAMP.sub("<time>", message)
    text = _DURATION.sub("<duration>", text)
    return _VOLATILE_HEX.sub("<hex>", text)


def digest(*parts: str) -> str:
    """A short stable key for the store (128 bits of SHA-256)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:32]


def object_key(event: Event) -> str:
    obj = event.involved_object
    return f"{obj.kind}/{obj.namespace}/{obj.name}"


def identity(event: Event) -> str:
    """What makes two notifications "identical" for ``repeatInterval``."""
    return digest(object_key(event), event.severity, event.reason, normalise_message(event.message))


def _dumps(value: Any) -> bytes:
    """JSON in a bytes object of its own size (orjson's result carries its whole buffer: 4 KiB)."""
    return bytes(memoryview(orjson.dumps(value)))


_COMPACT = 1
"""First byte of a packed value (JSON values start with ``{``: written by an earlier version)."""
_TIMES = struct.Struct("<d")
_STATE = struct.Struct("<B?dH")  # version, failing, since, length of the reason (then reason, message)


# ---- threshold -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arrivals:
    """The arrival times (epoch seconds) of the current window's events for one object, oldest first."""

    times: tuple[float, ...] = ()

    def to_bytes(self) -> bytes:
        """One version byte and 8 bytes per arrival (a count of 3: 17 bytes)."""
        return bytes((_COMPACT,)) + struct.pack(f"<{len(self.times)}d", *self.times)

    @classmethod
    def from_bytes(cls, data: bytes) -> Arrivals:
        if data[:1] == b"{":  # JSON, from an earlier version
            return cls(tuple(float(t) for t in orjson.loads(data)["t"]))
        return cls(tuple(t for (t,) in _TIMES.iter_unpack(data[1:])))


@dataclass(frozen=True)
class ThresholdDecision:
    send: bool
    state: Arrivals
    seen: int
    """Events counted in the window, this one included."""


def threshold_step(state: Arrivals | None, now: float, count: int, within: float) -> ThresholdDecision:
    """Count this arrival; send when ``count`` arrived within ``within`` seconds, then start over."""
    kept = [t for t in (state.times if state else ()) if now - t < within]
    seen = len(kept) + 1
    if seen >= count:
        return ThresholdDecision(True, Arrivals(), seen)
    return ThresholdDecision(False, Arrivals((*kept[-(count - 2) :], now) if count > 2 else (now,)), seen)


def describe_threshold(seen: int, within: float) -> str:
    return f"{seen} within {format_duration(within)}"


# ---- state change ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectState:
    """The last severity notified for one object through one Alert, and the error if it was one."""

    failing: bool
    reason: str = ""
    message: str = ""
    since: float = 0.0

    def to_bytes(self) -> bytes:
        reason = self.reason.encode("utf-8")[:0xFFFF]
        head = _STATE.pack(_COMPACT, self.failing, self.since, len(reason))
        return head + reason + self.message.encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> ObjectState:
        if data[:1] == b"{":  # JSON, from an earlier version
            raw = orjson.loads(data)
            return cls(bool(raw["f"]), str(raw.get("r", "")), str(raw.get("m", "")), float(raw.get("s", 0.0)))
        _, failing, since, length = _STATE.unpack_from(data)
        rest = data[_STATE.size :]
        reason = rest[:length].decode("utf-8", "replace")
        return cls(failing, reason, rest[length:].decode("utf-8", "replace"), since)


@dataclass(frozen=True)
class StateDecision:
    send: bool
    state: ObjectState | None = None
    """The state to store when sending (None: nothing to write)."""
    recovered_from: ObjectState | None = None
    """Set when this notification is a recovery: the error state it ends."""


def state_step(previous: ObjectState | None, event: Event, now: float) -> StateDecision:
    failing = event.severity == SEVERITY_ERROR
    was_failing = previous is not None and previous.failing
    if failing == was_failing:
        return StateDecision(False)
    if failing:
        return StateDecision(True, ObjectState(True, event.reason, _sample(event.message), now))
    return StateDecision(True, ObjectState(False, event.reason, "", now), recovered_from=previous)


def describe_recovery(previous: ObjectState, now: float) -> str:
    what = f"{previous.reason}: {previous.message}" if previous.reason else previous.message
    return f"{what} (failing for {format_duration(max(0.0, round(now - previous.since)))})"


def recovery_event(event: Event, previous: ObjectState, now: float) -> Event:
    metadata = {**event.metadata, RECOVERED_FROM: describe_recovery(previous, now)}
    return event.model_copy(update={"metadata": metadata})


# ---- grouping --------------------------------------------------------------------------------------------
def group_labels(event: Event, group_by: list[str]) -> tuple[tuple[str, str], ...]:
    """The values of the ``groupBy`` fields for this event (missing metadata: empty)."""
    obj = event.involved_object
    values: list[tuple[str, str]] = []
    for name in group_by:
        if name == "involvedObject.kind":
            value = obj.kind
        elif name == "involvedObject.namespace":
            value = obj.namespace
        elif name == "involvedObject.name":
            value = obj.name
        elif name == "reason":
            value = event.reason
        elif name == "severity":
            value = event.severity
        elif name.startswith("metadata."):
            value = event.metadata.get(name.removeprefix("metadata."), "")
        else:  # refused by the Alert's validation; never reached with a valid Alert
            value = ""
        values.append((name, value[:MAX_LABEL_LENGTH]))
    return tuple(values)


def _sample(message: str) -> str:
    line = message.split("\n", 1)[0]
    return line if len(line) <= MAX_SAMPLE_LENGTH else line[: MAX_SAMPLE_LENGTH - 1] + "…"


def describe_object(event: Event) -> str:
    obj = event.involved_object
    return f"{obj.kind.lower()}/{obj.name}.{obj.namespace}"


@dataclass(frozen=True)
class Group:
    """One group of one Alert: the batch waiting to be sent, and when.

    ``template`` is the first pending event's notification as the dispatcher serialised it (opaque here);
    ``seq`` counts notifications sent for the group (it names the next one: replicas flushing the same
    batch produce the same notification id, which the outbox stores once).
    """

    labels: tuple[tuple[str, str], ...]
    created: float
    due: float | None = None
    """When the pending batch goes out (None: nothing pending)."""
    last_flush: float | None = None
    seq: int = 0
    count: int = 0
    failing: bool = False
    objects: tuple[str, ...] = ()
    more_objects: int = 0
    samples: tuple[tuple[str, str, str], ...] = ()
    """(object, severity, first line of the message) of the first pending events."""
    template: bytes = b""
    first: bytes = b""
    """The first pending event (Go JSON)."""
    slot: int = -1
    """Where a durable store lists the group for other processes (``Slots``); -1: not listed."""

    # -- transitions ------------------------------------------------------------------------------------
    def add(self, event: Event, template: bytes, now: float, wait: float, interval: float) -> Group:
        g = self
        if g.due is None:  # a new batch: after groupWait for a new group, groupInterval after a flush
            due = now + wait if g.last_flush is None else max(now, g.last_flush + interval)
            g = replace(g, due=due, template=template, first=event.to_go_json())
        name = describe_object(event)
        objects, more = g.objects, g.more_objects
        if name not in objects:
            if len(objects) < MAX_GROUP_OBJECTS:
                objects = (*objects, name)
            else:
                more += 1  # an upper bound: a name past the list may be counted more than once
        samples = g.samples
        if len(samples) < MAX_GROUP_SAMPLES:
            samples = (*samples, (name, event.severity, _sample(event.message)))
        return replace(
            g,
            count=g.count + 1,
            failing=g.failing or event.severity == SEVERITY_ERROR,
            objects=objects,
            more_objects=more,
            samples=samples,
        )

    def is_due(self, now: float) -> bool:
        return self.due is not None and self.due <= now

    def flushed(self, now: float) -> Group:
        """The group once its batch is sent: empty, remembering when (for ``groupInterval``)."""
        return Group(self.labels, self.created, None, now, self.seq + 1, slot=self.slot)

    def ended(self, now: float, interval: float) -> bool:
        """Nothing pending and nothing new for ``interval`` since the last notification."""
        return self.due is None and (self.last_flush is None or now - self.last_flush >= interval)

    # -- rendering ----------------------------------------------------------------------------------------
    def title(self) -> str:
        subject = self.objects[0] if len(self.objects) == 1 and not self.more_objects else None
        head = f"{self.count} event{'s' if self.count != 1 else ''}"
        head += f" for {subject}" if subject else f" from {len(self.objects) + self.more_objects} objects"
        shown = ", ".join(f"{k}={v}" for k, v in self.labels if v)
        return f"{head} ({shown})" if shown else head

    def text(self) -> str:
        lines = [f"• {obj}: {message}" if message else f"• {obj}" for obj, _, message in self.samples]
        if self.count > len(self.samples):
            lines.append(f"• …and {self.count - len(self.samples)} more")
        if len(self.objects) + self.more_objects > len({obj for obj, _, _ in self.samples}):
            listed = ", ".join(self.objects)
            if self.more_objects:
                listed += f" and {self.more_objects} more"
            lines.append(f"Objects: {listed}")
        return "\n".join(lines)

    def event(self) -> Event:
        """The group as one event: the first pending event with the summary as its message, the worst
        severity, and how many events it stands for in its metadata (so every provider, message model or
        not, says it)."""
        first = Event.from_raw(orjson.loads(self.first))
        metadata = {**first.metadata, OCCURRENCES: str(self.count)}
        return first.model_copy(
            update={
                "message": self.text(),
                "severity": SEVERITY_ERROR if self.failing else first.severity,
                "metadata": metadata,
            }
        )

    # -- bytes --------------------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        return _dumps(
            {
                "labels": [list(kv) for kv in self.labels],
                "created": self.created,
                "due": self.due,
                "lastFlush": self.last_flush,
                "seq": self.seq,
                "count": self.count,
                "failing": self.failing,
                "objects": list(self.objects),
                "moreObjects": self.more_objects,
                "samples": [list(s) for s in self.samples],
                "template": self.template.decode("utf-8") if self.template else "",
                "first": self.first.decode("utf-8") if self.first else "",
                "slot": self.slot,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Group:
        raw = orjson.loads(data)
        return cls(
            labels=tuple((str(k), str(v)) for k, v in raw["labels"]),
            created=float(raw["created"]),
            due=None if raw.get("due") is None else float(raw["due"]),
            last_flush=None if raw.get("lastFlush") is None else float(raw["lastFlush"]),
            seq=int(raw.get("seq", 0)),
            count=int(raw.get("count", 0)),
            failing=bool(raw.get("failing", False)),
            objects=tuple(str(o) for o in raw.get("objects", ())),
            more_objects=int(raw.get("moreObjects", 0)),
            samples=tuple((str(a), str(b), str(c)) for a, b, c in raw.get("samples", ())),
            template=str(raw.get("template", "")).encode("utf-8"),
            first=str(raw.get("first", "")).encode("utf-8"),
            slot=int(raw.get("slot", -1)),
        )


_SLOTS = struct.Struct("<BQQ")


@dataclass(frozen=True)
class Slots:
    """Where a durable store lists one Alert's groups, so that any process can find and flush them.

    Each new group takes the slot ``hi`` (a key of its own naming the group's key) and moves ``hi`` on;
    a flusher reads slots ``lo`` to ``hi`` and moves ``lo`` past those that have expired. This value is
    16 bytes whatever the number of groups: creating a group never rewrites a list of every group (issue
    23 item 5: that list made ingest fall from 3,051 to ~300 events/s by 20,000 groups).
    """

    lo: int = 0
    hi: int = 0

    def to_bytes(self) -> bytes:
        return _SLOTS.pack(_COMPACT, self.lo, self.hi)

    @classmethod
    def from_bytes(cls, data: bytes) -> Slots:
        _, lo, hi = _SLOTS.unpack(data)
        return cls(lo, hi)


def legacy_group_index(data: bytes) -> list[str]:
    """The group keys in the index value that versions before issue 23 kept per Alert (one JSON list of
    every open group): read once after an upgrade so that the groups it lists are still flushed."""
    try:
        keys = orjson.loads(data)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(keys, list):
        return []
    return [k for k in keys if isinstance(k, str) and k.startswith("noise/group/")]

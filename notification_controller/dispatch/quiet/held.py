"""What a Silence or a mute window held, kept in the store's KV so that the end of the quiet sends one summary
(``summary.py``) on whichever replica, after a restart too (issue 26 item 4: nothing is silently lost).

One record per (Alert, what held it): a Silence (by its uid: a Silence deleted and made again under the same
name is another one) or the Alert's own mute window (``mute``). The record counts the held notifications per
involved object and keeps each object's last severity and message, so the summary can say which objects are
still failing. Keys are ``quiet/held/<digest>`` (the Alert's and the Silence's names never reach a key
verbatim); every write is a compare-and-set (two replicas holding for one Alert lose no count) and every key
has a TTL: the end of the quiet plus ``HELD_GRACE``, so a record nobody summarises (its Alert deleted, the
controller down for days) goes by itself.

Unauthenticated events choose the objects, so a record is bounded: at most ``MAX_HELD_OBJECTS`` objects are
listed (the notifications of the others are counted in ``more``), messages are cut to ``MAX_MESSAGE``
characters, the event kept for the summary carries no metadata. A record is at most ~30 KB whatever the flood.

Each Silence also has a total, ``quiet/silence-held/<namespace>/<name>/<uid>`` (an ASCII integer): the
Silence reconciler shows it as ``status.held`` (``held_total``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import orjson

from ...api.event import SEVERITY_ERROR, Event
from ...api.silence import Silence
from ...core.noise import describe_object, digest
from ...errors import StoreError
from ...store.base import Store

log = logging.getLogger(__package__)  # notification_controller.dispatch.quiet

MAX_HELD_OBJECTS = 50
"""Objects listed per record (the notifications of further objects are counted, not listed)."""
MAX_MESSAGE = 200
"""Characters of an object's last message kept (first line only)."""
MAX_NAME = 320
"""Characters of an object's name kept (``kind/name.namespace`` of a Kubernetes object is at most ~320; an
unauthenticated event may say anything)."""
MAX_FIELD = 253
"""Characters kept of each field of the event a record keeps (a Kubernetes name is at most 253)."""
HELD_GRACE = 3 * 24 * 3600.0
"""How long a record outlives the end of its quiet: the summary goes out at the end, or at the next start of a
controller that was down then (``summary.py``); after that the record expires."""
CLAIMED_TTL = 3600.0
"""Life of a record once its summary is claimed: long enough for every replica to see the claim."""
CAS_ATTEMPTS = 8
MUTE = "mute"
"""The source of a record held by the Alert's own ``muteTimes`` / ``activeTimes``."""

T = TypeVar("T")


def _sample(message: str) -> str:
    line = message.split("\n", 1)[0]
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


def _cut(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


def _dumps(value: Any) -> bytes:
    return bytes(memoryview(orjson.dumps(value)))  # orjson's result carries its 4 KiB buffer (core/noise.py)


@dataclass(frozen=True)
class HeldObject:
    name: str  # ``kind/name.namespace`` as the group notifications write it
    count: int
    severity: str
    message: str

    @property
    def failing(self) -> bool:
        return self.severity == SEVERITY_ERROR


@dataclass(frozen=True)
class Held:
    """What one Silence (or mute window) held for one Alert (the module docstring)."""

    alert: str  # ``namespace/name``
    source: str  # the Silence's uid, or ``mute``
    label: str  # ``Silence ns/name`` or ``spec.muteTimes`` / ``spec.activeTimes``
    until: float  # when the quiet ends (epoch seconds), as known at the last hold
    first: float  # when the first notification was held
    count: int = 0
    objects: tuple[HeldObject, ...] = ()
    more: int = 0  # notifications of objects past ``MAX_HELD_OBJECTS``
    more_failing: bool = False  # one of those was an error
    event: bytes = b""  # the first held event (Go JSON, no metadata, message cut): the summary's shape
    claimed: bool = False  # the summary was sent (or is being sent) by some replica

    def add(self, event: Event) -> Held:
        name = _cut(describe_object(event), MAX_NAME)
        severity = _cut(event.severity, 32)
        objects = list(self.objects)
        for i, obj in enumerate(objects):
            if obj.name == name:
                objects[i] = HeldObject(name, obj.count + 1, severity, _sample(event.message))
                return replace(self, count=self.count + 1, objects=tuple(objects))
        if len(objects) < MAX_HELD_OBJECTS:
            objects.append(HeldObject(name, 1, severity, _sample(event.message)))
            return replace(self, count=self.count + 1, objects=tuple(objects))
        return replace(
            self,
            count=self.count + 1,
            more=self.more + 1,
            more_failing=self.more_failing or event.severity == SEVERITY_ERROR,
        )

    @property
    def failing(self) -> list[HeldObject]:
        """The objects whose last held notification was an error: still failing when the quiet ends."""
        return [o for o in self.objects if o.failing]

    def to_bytes(self) -> bytes:
        return _dumps(
            {
                "v": 1,
                "a": self.alert,
                "s": self.source,
                "l": self.label,
                "u": self.until,
                "f": self.first,
                "n": self.count,
                "o": [[o.name, o.count, o.severity, o.message] for o in self.objects],
                "x": self.more,
                "xf": self.more_failing,
                "e": self.event.decode("utf-8", "replace"),
                "d": self.claimed,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Held:
        raw = orjson.loads(data)
        return cls(
            alert=str(raw["a"]),
            source=str(raw["s"]),
            label=str(raw["l"]),
            until=float(raw["u"]),
            first=float(raw["f"]),
            count=int(raw["n"]),
            objects=tuple(HeldObject(str(n), int(c), str(s), str(m)) for n, c, s, m in raw["o"]),
            more=int(raw.get("x", 0)),
            more_failing=bool(raw.get("xf", False)),
            event=str(raw.get("e", "")).encode("utf-8"),
            claimed=bool(raw.get("d", False)),
        )


def held_key(alert_id: str, source: str) -> str:
    return "quiet/held/" + digest(alert_id, source)


def silence_total_key(namespace: str, name: str, uid: str) -> str:
    """The Silence's total (``status.held``); its names are Kubernetes names, its uid the API server's."""
    return f"quiet/silence-held/{namespace}/{name}/{uid}"


def _key_of(silence: Silence) -> str:
    meta = silence.metadata
    return silence_total_key(meta.namespace, meta.name, meta.uid)


async def held_total(store: Store, silence: Silence) -> int:
    """How many notifications ``silence`` held (every Alert, every replica). Raises ``StoreError``."""
    entry = await store.kv_get(_key_of(silence))
    if entry is None:
        return 0
    try:
        return int(entry.value)
    except ValueError:
        return 0


def summary_event(event: Event) -> bytes:
    """The held event as the summary keeps it: no metadata (unbounded, and per event), every field cut."""
    obj = event.involved_object
    involved = obj.model_copy(
        update={name: _cut(getattr(obj, name), MAX_FIELD) for name in type(obj).model_fields}
    )
    update = {
        "involved_object": involved,
        "metadata": {},
        "message": _sample(event.message),
        "reason": _cut(event.reason, MAX_FIELD),
        "severity": _cut(event.severity, MAX_FIELD),
        "reporting_controller": _cut(event.reporting_controller, MAX_FIELD),
        "reporting_instance": _cut(event.reporting_instance, MAX_FIELD),
    }
    return event.model_copy(update=update).to_go_json()


class HeldStore:
    """Reads and compare-and-set writes of the records (see the module docstring)."""

    def __init__(self, state: Store) -> None:
        self.state = state

    async def _update(
        self, key: str, step: Callable[[bytes | None], tuple[bytes | None, T]], ttl: float
    ) -> T:
        for _ in range(CAS_ATTEMPTS):
            entry = await self.state.kv_get(key)
            new, result = step(entry.value if entry is not None else None)
            if new is None:
                return result
            written = await self.state.kv_cas(
                key, new, expected=entry.revision if entry is not None else None, ttl=ttl
            )
            if written is not None:
                return result
        raise StoreError(f"quiet: {CAS_ATTEMPTS} concurrent writers on one key")

    async def record(
        self,
        alert_id: str,
        source: str,
        label: str,
        until: float,
        event: Event,
        now: float,
        total_key: str | None = None,
    ) -> Held:
        """Count one held notification (and the Silence's total); returns the record. Raises ``StoreError``."""
        ttl = max(until - now, 0.0) + HELD_GRACE

        def step(data: bytes | None) -> tuple[bytes | None, Held]:
            current = Held.from_bytes(data) if data is not None else None
            if current is None or current.claimed:  # a new quiet (the last one's summary was sent)
                current = Held(alert_id, source, label, until, now, event=summary_event(event))
            updated = replace(current.add(event), until=until, label=label)
            return updated.to_bytes(), updated

        held = await self._update(held_key(alert_id, source), step, ttl)
        if total_key is not None:
            await self.count(total_key, ttl)
        return held

    async def count(self, total_key: str, ttl: float) -> int:
        """Add one to a Silence's total (``status.held``). Raises ``StoreError``."""

        def step(data: bytes | None) -> tuple[bytes | None, int]:
            try:
                total = int(data or b"0") + 1
            except ValueError:
                total = 1
            return str(total).encode("ascii"), total

        return await self._update(total_key, step, ttl)

    async def read(self, alert_id: str, source: str) -> Held | None:
        entry = await self.state.kv_get(held_key(alert_id, source))
        if entry is None:
            return None
        try:
            return Held.from_bytes(entry.value)
        except (ValueError, KeyError, TypeError):
            return None

    async def claim(self, alert_id: str, source: str) -> Held | None:
        """Take the record's summary for this process: the record as it was, or None when there is nothing
        to summarise or another replica claimed it first (one compare-and-set decides)."""
        key = held_key(alert_id, source)
        entry = await self.state.kv_get(key)
        if entry is None:
            return None
        try:
            held = Held.from_bytes(entry.value)
        except (ValueError, KeyError, TypeError):
            log.error("quiet: dropping an unreadable held record of alert %s", alert_id)
            return None
        if held.claimed or held.count == 0:
            return None
        claimed = replace(held, claimed=True, objects=(), event=b"")
        written = await self.state.kv_cas(key, claimed.to_bytes(), expected=entry.revision, ttl=CLAIMED_TTL)
        return held if written is not None else None

    async def unclaim(self, alert_id: str, source: str, held: Held) -> None:
        """Give a claimed record back (the enqueue of its summary failed): the next look sends it."""
        await self.state.kv_put(held_key(alert_id, source), held.to_bytes(), ttl=HELD_GRACE)

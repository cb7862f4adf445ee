"""What inhibition keeps in the store's KV (``quiet/inhibit.py`` says why and when), as plain data and keys:
the failure of an object, the objects failing for one inhibit rule, and what was held under a failing object.
Every record is bounded (``MAX_*``) and has a TTL; user text reaches a key only through ``digest``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import orjson

from ...api.alert import Alert, InhibitRule
from ...api.event import SEVERITY_ERROR, Event
from ...core.noise import digest
from ...core.quiet import EventFields, Predicate, compiled
from ...errors import StoreError
from ...objects.graph import Node, describe
from ...store.base import KVEntry, Store

FAILING_TTL = 24 * 3600.0
"""How long a failure inhibits after the object's first error without a newer event (a source that never
recovers does not inhibit forever)."""
RECOVERED_TTL = 600.0
"""How long the record of a recovery is kept (so a late duplicate of the error is still seen as new)."""
HELD_TTL = FAILING_TTL + 3600.0
MAX_HELD_OBJECTS = 20
"""Objects named per Alert under one failing object (the rest are counted)."""
MAX_ALERTS_PER_SOURCE = 32
MAX_RULE_OBJECTS = 32
"""Failing objects recorded per rule and set of ``equal`` values."""
MAX_RULE_KEYS = 1000
"""Rule records (sets of ``equal`` values) one Alert may create in this process before the next ones are
let through (an unauthenticated event chooses the values)."""
CAS_ATTEMPTS = 8
HELD_METADATA = "heldWhileFailing"
"""Metadata key of a recovery naming what was held (for the types that forward the event as is)."""


def failing_key(node: Node) -> str:
    return "quiet/failing/" + digest(describe(node))


def held_key(node: Node) -> str:
    return "quiet/inhibited/" + digest(describe(node))


def rule_key(alert_id: str, index: int, values: Sequence[str]) -> str:
    return "quiet/failing/rule/" + digest(alert_id, str(index), *values)


def alert_id(alert: Alert) -> str:
    return f"{alert.metadata.namespace}/{alert.metadata.name}"


def node_of(event: Event) -> Node:
    obj = event.involved_object
    return (obj.kind, obj.namespace, obj.name)


def parse_node(text: str) -> Node:
    kind, _, rest = text.partition("/")
    namespace, _, name = rest.partition("/")
    return (kind, namespace, name)


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def held_line(objects: Sequence[str], more: int) -> str:
    listed = ", ".join(objects)
    return listed + (f" and {more} more" if more else "")


class Full(Exception):
    """A bounded record has no room: the notification goes through (counted, the reason is the message)."""


@dataclasses.dataclass(frozen=True)
class Held:
    """What was held under one failing object: per Alert id, the objects (first ``MAX_HELD_OBJECTS``) and
    how many more."""

    since: float
    alerts: dict[str, tuple[tuple[str, ...], int]]

    def to_bytes(self) -> bytes:
        raw = {"s": self.since, "a": {k: [list(o), m] for k, (o, m) in self.alerts.items()}}
        return bytes(memoryview(orjson.dumps(raw)))

    @classmethod
    def from_bytes(cls, data: bytes) -> Held:
        raw = orjson.loads(data)
        alerts = {str(k): (tuple(str(o) for o in v[0]), int(v[1])) for k, v in dict(raw.get("a", {})).items()}
        return cls(float(raw.get("s", 0.0)), alerts)

    def with_object(self, alert: str, obj: str) -> Held | None:
        """The record with ``obj`` held for ``alert``; None when it is there already. Raises ``Full`` when
        ``alert`` does not fit."""
        objects, more = self.alerts.get(alert, ((), 0))
        if obj in objects:
            return None
        if alert not in self.alerts and len(self.alerts) >= MAX_ALERTS_PER_SOURCE:
            raise Full("alert_limit")
        if len(objects) < MAX_HELD_OBJECTS:
            objects = (*objects, obj)
        else:
            more += 1  # an upper bound: a name past the list held twice is counted twice
        return Held(self.since, {**self.alerts, alert: (objects, more)})


@dataclasses.dataclass(frozen=True)
class RuleFailing:
    """The objects failing for one rule and one set of ``equal`` values: (Kind/ns/name, since)."""

    objects: tuple[tuple[str, float], ...] = ()

    def to_bytes(self) -> bytes:
        return bytes(memoryview(orjson.dumps([list(o) for o in self.objects])))

    @classmethod
    def from_bytes(cls, data: bytes) -> RuleFailing:
        return cls(tuple((str(o), float(s)) for o, s in orjson.loads(data)))


class ErrorFields(EventFields):
    """An event's fields with ``severity`` read as ``error``: would this object's error match a rule's
    ``sourceMatchers``? (A recovery must end what its error started.)"""

    __slots__ = ()

    def __getitem__(self, key: str) -> str:
        return SEVERITY_ERROR if key == "severity" else super().__getitem__(key)


@dataclasses.dataclass(frozen=True)
class Rule:
    """One ``spec.inhibitRules`` entry, compiled (``core/quiet.py``)."""

    source: Predicate
    target: Predicate
    equal: tuple[str, ...]

    @classmethod
    def of(cls, rule: InhibitRule) -> Rule:
        return cls(compiled(rule.source_matchers), compiled(rule.target_matchers), tuple(rule.equal or ()))


Step = Callable[[KVEntry | None], tuple[bytes, float] | None]
"""Given the key's entry: the bytes to write and their TTL, or None to write nothing."""


async def update(state: Store, key: str, step: Step) -> bool:
    """Read ``key``, apply ``step``, compare-and-set; again on a concurrent writer. True when written."""
    for _ in range(CAS_ATTEMPTS):
        entry = await state.kv_get(key)
        change = step(entry)
        if change is None:
            return False
        expected = entry.revision if entry is not None else None
        if await state.kv_cas(key, change[0], expected=expected, ttl=change[1]) is not None:
            return True
    raise StoreError(f"inhibition: {CAS_ATTEMPTS} concurrent writers on one key")

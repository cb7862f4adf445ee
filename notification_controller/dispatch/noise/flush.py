"""The group flusher: sends every due ``groupBy`` group and ends quiet ones (one task per process,
``run``; every ``tick``). The process that creates or joins a group schedules its flush here; with a
durable store the groups other processes opened (or this one before a restart) are found by reading
their numbered slots (``groups.py`` hands them out), a few per tick. A flushed group's notification id
is derived from the group and its flush count, so two replicas flushing the same batch write one
outbox item. The flusher is a producer like the event server: ``run`` and ``flush_due`` are given the
queue's ``enqueue``, so that nothing points back at the dispatcher."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from ...api.alert import Alert
from ...core.noise import OCCURRENCES, Group, Slots, digest, legacy_group_index
from ...errors import ControllerError, StoreError
from ...lib.deadlines import Deadlines
from ...providers.message import Message
from ..model import Notification
from .state import NoiseState, id_of, seconds

log = logging.getLogger(__package__)

Enqueue = Callable[[Notification], Awaitable[None]]

DEFAULT_GROUP_WAIT = 30.0  # Alertmanager's group_wait
DEFAULT_GROUP_INTERVAL = 300.0  # Alertmanager's group_interval
_MAX_GROUPS_PER_TICK = 1000
RESCAN_INTERVAL = 30.0
"""Durable stores: how long after reading all of an Alert's group slots they are read again, for groups
other processes opened."""
SCAN_PER_TICK = 256
"""Durable stores: slots read per tick at most (all Alerts together): the slots of 20,000 groups are
20,000 reads through SQLite's one thread or NATS's round trips, spread over ticks rather than queued
ahead of the events in one burst (``tests/unit/core/test_noise.py`` counts the reads per tick)."""
_SUSPENDED_RETRY = 30.0
SLOTS_TTL = 7 * 24 * 3600.0
"""Life of an Alert's slot counter (17 bytes) after its last new group: longer than any slot it handed
out, so that a slot number is not handed out twice while a long-lived group still holds it."""


def group_key(alert: Alert, labels: tuple[tuple[str, str], ...]) -> str:
    return "noise/group/" + digest(id_of(alert), *(f"{k}={v}" for k, v in labels))


def slots_key(alert_id: str) -> str:
    return "noise/groups/slots/" + digest(alert_id)


def slot_key(alert_id: str, n: int) -> str:
    return f"noise/groups/slot/{digest(alert_id)}/{n}"


def timing(alert: Alert) -> tuple[float, float]:
    spec = alert.spec
    return (
        seconds(spec.group_wait, DEFAULT_GROUP_WAIT),
        seconds(spec.group_interval, DEFAULT_GROUP_INTERVAL),
    )


def group_ttl(wait: float, interval: float) -> float:
    """A group key outlives its longest possible quiet period, then disappears by itself."""
    return wait + 2 * interval + 60.0


class GroupFlusher:
    def __init__(self, core: NoiseState, tick: float = 1.0) -> None:
        self.core = core
        self.tick = tick
        """Seconds between two looks for due groups (a group goes out at most this late)."""
        # group flushes this process knows of: group key -> when to look, and whose
        self._flush_at = Deadlines()
        self._owner: dict[str, str] = {}
        self._scan_at: dict[str, float] = {}  # Alert id -> when its slots are read again
        self._cursor: dict[str, int] = {}  # Alert id -> the next slot to read
        self._scan_turn = 0  # which grouping Alert's slots are read first at the next tick
        self._migrated: set[str] = set()  # Alert ids whose pre-issue-23 group index was looked for

    def schedule(self, key: str, alert_id: str, when: float) -> None:
        current = self._flush_at.at.get(key)
        if current is None or when < current:
            self._flush_at.set(key, when)
        self._owner[key] = alert_id

    def _forget(self, key: str, alert_id: str) -> None:
        self._flush_at.discard(key)
        self._owner.pop(key, None)
        groups = self.core.groups.get(alert_id)
        if groups is not None:
            groups.discard(key)

    async def flush_due(self, enqueue: Enqueue) -> int:
        """Send every due group this process knows of; end quiet groups. With a durable store, first
        read some slots for groups other processes opened (``_scan_some``). Returns notifications sent."""
        now = self.core.now()
        if self.core.state.durable:
            try:
                await self._scan_some(now)
            except StoreError as exc:
                self.core.store_failed("group flush", exc)
        sent = 0
        for key in self._flush_at.expired(now, limit=_MAX_GROUPS_PER_TICK):
            alert_id = self._owner.pop(key, "")
            try:
                sent += await self._look(key, alert_id, now, enqueue)
            except StoreError as exc:
                self.core.store_failed("group flush", exc)
                self.schedule(key, alert_id, now + self.tick)
        return sent

    async def _look(self, key: str, alert_id: str, now: float, enqueue: Enqueue) -> int:
        """Flush one group if it is due, and say when to look at it next (or forget it)."""
        namespace, _, name = alert_id.partition("/")
        alert = self.core.objects.alert(namespace, name)
        if alert is None or alert.spec.group_by is None:
            self._forget(key, alert_id)  # the Alert is gone or no longer groups: its groups expire
            return 0
        if alert.spec.suspend:
            self.schedule(key, alert_id, now + _SUSPENDED_RETRY)
            return 0
        entry = await self.core.state.kv_get(key)
        if entry is None:
            self._forget(key, alert_id)
            return 0
        wait, interval = timing(alert)
        group = Group.from_bytes(entry.value)
        if group.is_due(now):
            sent = await self._flush(key, group, entry.revision, now, wait, interval, enqueue)
            self.schedule(key, alert_id, now + interval)  # then: the next batch, or the end
            return 1 if sent else 0
        if group.due is not None:
            self.schedule(key, alert_id, group.due)
        elif group.ended(now, interval):
            self._forget(key, alert_id)
        else:
            assert group.last_flush is not None  # not ended without a flush
            self.schedule(key, alert_id, group.last_flush + interval)
        return 0

    async def _scan_some(self, now: float) -> None:
        """Read up to ``SCAN_PER_TICK`` group slots, Alert after Alert (round-robin), each Alert's again
        ``RESCAN_INTERVAL`` after the last of them was read."""
        alerts = [a for a in self.core.objects.alerts() if a.spec.group_by is not None and not a.spec.suspend]
        budget = SCAN_PER_TICK
        for i in range(len(alerts)):
            turn = (self._scan_turn + i) % len(alerts)
            alert = alerts[turn]
            if now < self._scan_at.get(id_of(alert), 0.0):
                continue
            budget -= await self._scan(alert, budget, now)
            if budget <= 0:
                self._scan_turn = turn  # this Alert goes on first next time
                return

    async def _scan(self, alert: Alert, budget: int, now: float) -> int:
        """Read up to ``budget`` of ``alert``'s slots from its cursor; schedule the groups this process
        does not know of (opened before a restart, or by another replica); move the first slot past the
        expired ones. Returns the reads made."""
        alert_id = id_of(alert)
        if alert_id not in self._migrated:
            self._migrated.add(alert_id)
            await self._migrate(alert_id)
        slots_key_ = slots_key(alert_id)
        entry = await self.core.state.kv_get(slots_key_)
        if entry is None:
            self._scan_at[alert_id] = now + RESCAN_INTERVAL
            return 1
        slots = Slots.from_bytes(entry.value)
        first = self._cursor.get(alert_id, slots.lo)
        if not slots.lo <= first < slots.hi:
            first = slots.lo
        last = min(slots.hi, first + max(1, budget - 1))
        if last >= slots.hi:  # all read: again after the interval, from the start
            self._cursor.pop(alert_id, None)
            self._scan_at[alert_id] = now + RESCAN_INTERVAL
        else:
            self._cursor[alert_id] = last
        lo = slots.lo
        expired_prefix = first == slots.lo
        reads = 1 + (last - first)
        for n in range(first, last):
            slot = await self.core.state.kv_get(slot_key(alert_id, n))
            if slot is None:
                if expired_prefix:
                    lo = n + 1
                continue
            expired_prefix = False
            key = slot.value.decode("ascii", "replace")
            if key in self._flush_at or not key.startswith("noise/group/"):
                continue
            group_entry = await self.core.state.kv_get(key)
            reads += 1
            if group_entry is None:
                continue
            group = Group.from_bytes(group_entry.value)
            when = group.due if group.due is not None else (group.last_flush or group.created)
            self.schedule(key, alert_id, when)
        if lo > slots.lo:  # another writer may have taken a slot meanwhile: then next time
            await self.core.state.kv_cas(
                slots_key_, Slots(lo, slots.hi).to_bytes(), expected=entry.revision, ttl=SLOTS_TTL
            )
        return reads

    async def _migrate(self, alert_id: str) -> None:
        """After an upgrade: schedule the groups of the index an earlier version kept (a value without
        TTL, rewritten with every new group), then let that value expire."""
        legacy_key = "noise/groups/" + digest(alert_id)
        legacy = await self.core.state.kv_get(legacy_key)
        if legacy is None:
            return
        now = self.core.now()
        for key in legacy_group_index(legacy.value)[: 4 * self.core.settings.max_groups_per_alert]:
            self.schedule(key, alert_id, now)  # ``_look`` reads each: flush, wait or forget
        await self.core.state.kv_cas(legacy_key, legacy.value, expected=legacy.revision, ttl=RESCAN_INTERVAL)

    async def _flush(
        self,
        key: str,
        group: Group,
        revision: int,
        now: float,
        wait: float,
        interval: float,
        enqueue: Enqueue,
    ) -> bool:
        try:
            template = Notification.from_json(group.template)
        except ControllerError as exc:  # written by an incompatible version: end the group
            log.error("noise control: dropping an unreadable group: %s", exc)
            await self.core.state.kv_cas(key, group.flushed(now).to_bytes(), expected=revision, ttl=60.0)
            return False
        event = group.event()
        message = Message(
            group.title(),
            event.message,
            event.severity,
            (*((k, v) for k, v in group.labels if v), (OCCURRENCES, str(group.count))),
        )
        notification = dataclasses.replace(
            template,
            id=f"group-{key.rsplit('/', 1)[-1]}-{group.seq}",
            event=event,
            message=message,
            group=group.samples,
            received_at=time.time(),  # the wait the Alert asked for is not delivery latency
        )
        # sent first, then marked: a replica that loses the compare-and-set sent the same id (stored once)
        await enqueue(notification)
        await self.core.state.kv_cas(
            key, group.flushed(now).to_bytes(), expected=revision, ttl=group_ttl(wait, interval)
        )
        return True

    async def run(self, enqueue: Enqueue) -> None:
        """Flush due groups every ``tick`` until cancelled."""
        while True:
            await asyncio.sleep(self.tick)
            try:
                await self.flush_due(enqueue)
            except Exception as exc:  # never let the flusher die: the next tick tries again
                log.error("noise control: group flush failed: %s", type(exc).__name__)

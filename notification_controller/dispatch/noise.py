"""Noise control as pipeline stages: what an Alert's ``filter``, ``threshold``, ``notifyOn``,
``repeatInterval``, ``groupBy`` and ``threadBy`` do (docs/noise-control.md; decisions: ``core/noise.py``).

The five pre-queue stages run after Flux's rules, in this order: filter → threshold → state change →
repeat → group. Each does nothing (and costs one attribute check) for an Alert without its field, so a Flux
Alert goes through exactly as before. A suppressed event is a ``Drop(suppressed=True)``: counted in
``notification_suppressed_total{reason}`` and logged at debug level, never silently.

State lives in the state layer's KV (``state/``): with ``--store=memory`` in this process (lost on
restart, not shared), with ``sqlite:`` across restarts, with ``nats://`` across replicas. Writes are
compare-and-set, so two replicas counting the same object never lose an arrival. Keys are digests of the
Alert and of what the state is about (user text never reaches a key verbatim).

Grouping keeps each group in its own key. The process that creates or joins a group schedules its flush
in memory (``lib/deadlines``); with a durable store the group also takes a numbered slot (``Slots``), so a
restarted process or another replica finds it by reading the slots, never one list of every group that
would be rewritten with each new one (issue 23 item 5). ``run`` (one task per process) flushes due groups
every ``tick``. A flushed group's notification id is derived from the group and its flush count, so two
replicas flushing the same batch write one outbox item.

Unauthenticated events choose the objects and group labels, so the state is bounded (issue 23 item 5):
every key has a TTL (``threshold.within``, ``repeatInterval``, the group's lifetime, and
``--noise-state-retention`` for state changes), and an Alert tracks at most ``--noise-max-keys-per-alert``
keys and ``--noise-max-groups-per-alert`` groups in this process. Past a cap, an event that would need a
new key is let through without noise control, counted in
``notification_noise_untracked_total{stage,reason}`` and reported by a Warning on the Alert at most every
five minutes: the same choice as for a store error.

``threadBy`` is a pre-send stage (it reads the thread of the key) and a post-send one (it remembers the
thread a delivery started); it applies to notifiers whose ``threads`` is true (Slack's chat.postMessage
with a bot token).

When the store cannot be reached, a stage lets the notification through (``StoreError`` is logged and
counted, ``reason="store_error"``): a notification too many is better than one lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from ..api.alert import Alert, NotifyOn, ThreadBy
from ..core.noise import (
    OCCURRENCES,
    Arrivals,
    Group,
    ObjectState,
    Slots,
    StateDecision,
    Suppressed,
    ThresholdDecision,
    describe_threshold,
    digest,
    group_labels,
    identity,
    legacy_group_index,
    object_key,
    recovery_event,
    state_step,
    threshold_step,
)
from ..errors import ControllerError, StoreError
from ..lib.clock import Clock
from ..lib.deadlines import Deadlines
from ..lib.duration import parse_duration
from ..metrics import NoiseMetrics
from ..providers.message import Message, Thread
from ..sandbox import SandboxFailure, SandboxPool
from ..settings import Settings
from ..state.base import Store
from ..store.base import ObjectStore
from .model import Delivery, Draft, Drop, Notification

log = logging.getLogger(__name__)

DEFAULT_GROUP_WAIT = 30.0  # Alertmanager's group_wait
DEFAULT_GROUP_INTERVAL = 300.0  # Alertmanager's group_interval
THREAD_TTL = 7 * 24 * 3600.0
"""How long a thread is followed: after a week without a new thread for the key, a new one starts."""
CAS_ATTEMPTS = 8
"""Compare-and-set retries before a stage gives up and lets the notification through."""
_MAX_GROUPS_PER_TICK = 1000
WARN_INTERVAL = 300.0
"""At most one Warning per Alert this often when a cap lets events through untracked."""
RESCAN_INTERVAL = 30.0
"""Durable stores: how long after reading all of an Alert's group slots they are read again, for groups
other processes opened."""
SCAN_PER_TICK = 256
"""Durable stores: slots read per tick at most (all Alerts together): the slots of 20,000 groups are
20,000 reads through SQLite's one thread or NATS's round trips, spread over ticks rather than queued
ahead of the events in one burst (``tests/unit/test_noise.py`` counts the reads per tick)."""
_SUSPENDED_RETRY = 30.0
SLOT_BLOCK = 64
"""Slots a process reserves at once for an Alert's new groups (one counter write per 64 new groups)."""
SLOTS_TTL = 7 * 24 * 3600.0
"""Life of an Alert's slot counter (17 bytes) after its last new group: longer than any slot it handed
out, so that a slot number is not handed out twice while a long-lived group still holds it."""

T = TypeVar("T")
R = TypeVar("R")


class _Full(Exception):
    """A stage would create a key past its Alert's cap."""


@dataclass(frozen=True)
class NoiseSettings:
    tick: float = 1.0
    """Seconds between two looks for due groups (a group goes out at most this late)."""
    state_retention: float = 7 * 24 * 3600.0
    """How long ``notifyOn: StateChange`` remembers an object's last notified severity."""
    max_keys: int = 10_000
    """Threshold, state and repeat keys one Alert may have (this process)."""
    max_groups: int = 1_000
    """Open groups one Alert may have (this process)."""

    @classmethod
    def of(cls, s: Settings) -> NoiseSettings:
        n = s.noise
        return cls(
            state_retention=n.state_retention,
            max_keys=n.max_keys_per_alert,
            max_groups=n.max_groups_per_alert,
        )


def _seconds(value: str | None, default: float) -> float:
    return parse_duration(value) if value else default


def _drop(reason: Suppressed, draft: Draft, why: str) -> Drop:
    return Drop(reason, f"{draft.event.involved_object.describe()}: {why}", suppressed=True)


def _alert_id(alert: Alert) -> str:
    meta = alert.metadata
    return f"{meta.namespace}/{meta.name}"


class NoiseControl:
    """The stages and the group flusher, over one ``Store`` (see the module docstring)."""

    def __init__(
        self,
        state: Store,
        objects: ObjectStore,
        clock: Clock,
        enqueue: Callable[[Notification], Awaitable[None]],
        settings: NoiseSettings | None = None,
        *,
        warn: Callable[[Alert, str, str], None] | None = None,
        metrics: NoiseMetrics | None = None,
        sandbox: SandboxPool | None = None,
    ) -> None:
        self.sandbox = sandbox  # spec.filter beyond the inline-safe subset runs there (``filter``)
        self.state = state
        self.objects = objects
        self.clock = clock
        self.enqueue = enqueue
        self.settings = settings or NoiseSettings()
        self.warn = warn or (lambda alert, reason, message: None)
        self.metrics = metrics or NoiseMetrics(CollectorRegistry())
        self.store_errors = 0
        # what this process wrote, per Alert id: key -> expiry (the caps count these)
        self._keys: dict[str, Deadlines] = {}
        self._groups: dict[str, Deadlines] = {}
        self._warned: dict[str, float] = {}
        # group flushes this process knows of: group key -> when to look, and whose
        self._flush_at = Deadlines()
        self._owner: dict[str, str] = {}
        self._scan_at: dict[str, float] = {}  # Alert id -> when its slots are read again
        self._cursor: dict[str, int] = {}  # Alert id -> the next slot to read
        self._scan_turn = 0  # which grouping Alert's slots are read first at the next tick
        self._migrated: set[str] = set()  # Alert ids whose pre-issue-23 group index was looked for
        self._reserved: dict[str, tuple[int, int]] = {}  # alert id -> this process's free slots [start, end)
        self.metrics.keys.labels(kind="keys").set_function(lambda: self._count(self._keys))
        self.metrics.keys.labels(kind="groups").set_function(lambda: self._count(self._groups))

    # ---- the stage lists -------------------------------------------------------------------------------
    def pre_queue(self) -> list[Stage]:
        return [
            Stage("noise-filter", self.filter),
            Stage("noise-threshold", self.threshold),
            Stage("noise-state", self.state_change),
            Stage("noise-repeat", self.repeat),
            Stage("noise-group", self.group),
        ]

    # ---- helpers ---------------------------------------------------------------------------------------
    def _now(self) -> float:
        return self.clock.now().timestamp()

    async def _update(
        self,
        key: str,
        decode: Callable[[bytes], T],
        step: Callable[[T | None], tuple[bytes | None, R]],
        ttl: float,
        *,
        create: bool = True,
    ) -> R:
        """Read ``key``, compute (new bytes or None for no write, result), compare-and-set; retry on a
        concurrent writer. Raises ``StoreError``, and ``_Full`` when the key is absent, would be written,
        and ``create`` is false."""
        for _ in range(CAS_ATTEMPTS):
            entry = await self.state.kv_get(key)
            value = decode(entry.value) if entry is not None else None
            new, result = step(value)
            if new is None:
                return result
            if entry is None and not create:
                raise _Full(key)
            written = await self.state.kv_cas(
                key, new, expected=entry.revision if entry is not None else None, ttl=ttl
            )
            if written is not None:
                return result
        raise StoreError(f"noise control: {CAS_ATTEMPTS} concurrent writers on one key")

    def _store_failed(self, stage: str, exc: StoreError) -> None:
        self.store_errors += 1
        self.metrics.untracked.labels(stage=stage.split()[0], reason="store_error").inc()
        log.warning("noise control %s: state store unavailable, notifying anyway: %s", stage, exc)

    # ---- caps ------------------------------------------------------------------------------------------
    def _count(self, table: dict[str, Deadlines]) -> int:
        now = self._now()
        for alert_id in list(table):
            keys = table[alert_id]
            keys.expired(now)
            if not keys:
                del table[alert_id]
        return sum(len(keys) for keys in table.values())

    def _room(self, table: dict[str, Deadlines], alert: Alert, key: str, cap: int) -> bool:
        """Whether ``key`` is tracked for ``alert`` already or a new key fits under ``cap``."""
        keys = table.get(_alert_id(alert))
        if keys is None or key in keys:
            return True
        if len(keys) < cap:
            return True
        keys.expired(self._now())
        return len(keys) < cap

    @staticmethod
    def _track(table: dict[str, Deadlines], alert: Alert, key: str, deadline: float) -> None:
        alert_id = _alert_id(alert)
        keys = table.get(alert_id)
        if keys is None:
            keys = table[alert_id] = Deadlines()
        keys.set(key, deadline)

    def _untracked(self, draft: Draft, stage: str, reason: str, flag: str, cap: int) -> Draft:
        """Past a cap: the event goes through without noise control, counted, warned about now and then."""
        self.metrics.untracked.labels(stage=stage, reason=reason).inc()
        alert = draft.alert
        alert_id = _alert_id(alert)
        now = self._now()
        if now - self._warned.get(alert_id, -WARN_INTERVAL) >= WARN_INTERVAL:
            self._warned[alert_id] = now
            what = "groups" if reason == "group_limit" else "objects"
            message = (
                f"noise control tracks {cap} {what} for this Alert already ({flag}): events that need a new "
                f"one are notified without {stage} control"
            )
            log.info("alert %s: %s", alert_id, message)  # a flood, not a fault: the Warning says it
            self.warn(alert, "NoiseControlLimitReached", message)
        return draft

    # ---- 1. filter -------------------------------------------------------------------------------------
    def filter(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        """``spec.filter`` (CEL, variable ``event``). An inline-safe expression (no comprehension, no
        growing call: ``Expression.inline_safe``) is evaluated here, on the loop (tens of µs). Any other
        one runs in the sandbox's worker processes (bounded in time and memory): with the memory store as
        an awaitable here (the event POST was answered already); with a durable store it is *deferred*
        to send time (``filter_at_send``), so that the POST, which waits for the pre-queue stages before
        it answers, never waits on a tenant's expression (issue 23)."""
        expression = draft.alert.spec.filter
        if not expression:
            return draft
        from ..core.cel import CELError, OutputType, compile_expression  # the CEL engine only when used

        try:
            program = compile_expression(expression, variables=("event",), output=OutputType.BOOL)
            if program.inline_safe or self.sandbox is None:
                keep = program.evaluate_bool({"event": draft.event.as_cel()})
            elif self.state.durable:
                return draft  # evaluated by ``filter_at_send`` once the notification is stored
            else:
                return self._filter_in_sandbox(draft, program)
        except CELError as exc:
            return self._filter_failed(draft, exc)
        return draft if keep else _drop(Suppressed.FILTER, draft, "spec.filter returned false")

    async def _filter_in_sandbox(self, draft: Draft, program: Any) -> Draft | Drop:
        from ..core.cel import CELError

        assert self.sandbox is not None
        try:
            keep = await self.sandbox.cel(
                program,
                {"event": draft.event.as_cel()},
                namespace=draft.alert.metadata.namespace,
                kind="filter",
            )
        except (CELError, SandboxFailure) as exc:
            return self._filter_failed(draft, exc)
        if not isinstance(keep, bool):
            return self._filter_failed(draft, TypeError("not a bool"))
        return draft if keep else _drop(Suppressed.FILTER, draft, "spec.filter returned false")

    def _filter_failed(self, draft: Draft, exc: Exception) -> Draft:
        # fail open: a typo (or an expression over the sandbox's bounds) must not swallow an outage's
        # notifications; the Alert says so
        self.warn(
            draft.alert,
            "FilterFailed",
            f"spec.filter could not be evaluated for {draft.event.involved_object.describe()}, "
            f"notifying anyway: {exc}",
        )
        return draft

    async def filter_at_send(self, delivery: Delivery) -> Delivery | Drop:
        """Pre-send (durable stores only): the ``spec.filter`` that ``filter`` deferred, evaluated in the
        sandbox against the current Alert. It runs after threshold, notifyOn, repeatInterval and groupBy
        (docs/noise-control.md says so); fail open as ``filter``."""
        expression = delivery.alert.spec.filter
        if not expression or self.sandbox is None or not self.state.durable:
            return delivery
        from ..core.cel import CELError, OutputType, compile_expression

        draft = Draft(delivery.event, delivery.alert, delivery.provider)
        try:
            program = compile_expression(expression, variables=("event",), output=OutputType.BOOL)
        except CELError as exc:
            self._filter_failed(draft, exc)
            return delivery
        if program.inline_safe:
            return delivery  # decided before the notification was stored
        decided = await self._filter_in_sandbox(draft, program)
        return decided if isinstance(decided, Drop) else delivery

    # ---- 2. threshold ----------------------------------------------------------------------------------
    def threshold(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if draft.alert.spec.threshold is None:
            return draft
        return self._threshold(draft)

    async def _threshold(self, draft: Draft) -> Draft | Drop:
        spec = draft.alert.spec.threshold
        assert spec is not None
        count, within = spec.count, parse_duration(spec.within)
        now = self._now()
        alert = draft.alert
        key = "noise/threshold/" + digest(_alert_id(alert), object_key(draft.event))
        room = self._room(self._keys, alert, key, self.settings.max_keys)

        def step(state: Arrivals | None) -> tuple[bytes | None, ThresholdDecision]:
            decision = threshold_step(state, now, count, within)
            return decision.state.to_bytes(), decision

        try:
            decision = await self._update(key, Arrivals.from_bytes, step, ttl=within, create=room)
        except _Full:
            return self._untracked(
                draft, "threshold", "key_limit", "--noise-max-keys-per-alert", self.settings.max_keys
            )
        except StoreError as exc:
            self._store_failed("threshold", exc)
            return draft
        self._track(self._keys, alert, key, now + within)
        if not decision.send:
            return _drop(
                Suppressed.THRESHOLD, draft, f"{decision.seen} of {count} events within {spec.within}"
            )
        event = draft.event
        metadata = {**event.metadata, OCCURRENCES: describe_threshold(decision.seen, within)}
        return dataclasses.replace(draft, event=event.model_copy(update={"metadata": metadata}))

    # ---- 3. state change -------------------------------------------------------------------------------
    def state_change(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if draft.alert.spec.notify_on is not NotifyOn.STATE_CHANGE:
            return draft
        return self._state_change(draft)

    async def _state_change(self, draft: Draft) -> Draft | Drop:
        now = self._now()
        alert = draft.alert
        key = "noise/state/" + digest(_alert_id(alert), object_key(draft.event))
        retention = self.settings.state_retention
        room = self._room(self._keys, alert, key, self.settings.max_keys)

        def step(previous: ObjectState | None) -> tuple[bytes | None, StateDecision]:
            decision = state_step(previous, draft.event, now)
            return (decision.state.to_bytes() if decision.state is not None else None), decision

        try:  # an object never notified and still healthy writes nothing, so costs no key
            decision = await self._update(key, ObjectState.from_bytes, step, ttl=retention, create=room)
        except _Full:
            return self._untracked(
                draft, "state", "key_limit", "--noise-max-keys-per-alert", self.settings.max_keys
            )
        except StoreError as exc:
            self._store_failed("state change", exc)
            return draft
        if not decision.send:
            return _drop(Suppressed.STATE, draft, f"still {draft.event.severity or 'info'}")
        self._track(self._keys, alert, key, now + retention)
        previous = decision.recovered_from
        if previous is None:
            return draft
        event = recovery_event(draft.event, previous, now)
        base = Message.of(event)
        message = dataclasses.replace(base, title=f"Recovered: {base.title}")
        return dataclasses.replace(draft, event=event, message=message)

    # ---- 4. repeat -------------------------------------------------------------------------------------
    def repeat(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if not draft.alert.spec.repeat_interval:
            return draft
        return self._repeat(draft)

    async def _repeat(self, draft: Draft) -> Draft | Drop:
        interval = draft.alert.spec.repeat_interval
        assert interval is not None
        alert = draft.alert
        key = "noise/repeat/" + digest(_alert_id(alert), identity(draft.event))
        if not self._room(self._keys, alert, key, self.settings.max_keys):
            return self._untracked(
                draft, "repeat", "key_limit", "--noise-max-keys-per-alert", self.settings.max_keys
            )
        ttl = parse_duration(interval)
        try:
            seen = await self.state.seen(key, ttl)
        except StoreError as exc:
            self._store_failed("repeat", exc)
            return draft
        if seen:
            return _drop(Suppressed.REPEAT, draft, f"identical notification sent less than {interval} ago")
        self._track(self._keys, alert, key, self._now() + ttl)
        return draft

    # ---- 5. group --------------------------------------------------------------------------------------
    def group(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if draft.alert.spec.group_by is None:
            return draft
        return self._group(draft)

    def _group_key(self, alert: Alert, labels: tuple[tuple[str, str], ...]) -> str:
        return "noise/group/" + digest(_alert_id(alert), *(f"{k}={v}" for k, v in labels))

    @staticmethod
    def _slots_key(alert_id: str) -> str:
        return "noise/groups/slots/" + digest(alert_id)

    @staticmethod
    def _slot_key(alert_id: str, n: int) -> str:
        return f"noise/groups/slot/{digest(alert_id)}/{n}"

    def _timing(self, alert: Alert) -> tuple[float, float]:
        spec = alert.spec
        return (
            _seconds(spec.group_wait, DEFAULT_GROUP_WAIT),
            _seconds(spec.group_interval, DEFAULT_GROUP_INTERVAL),
        )

    async def _group(self, draft: Draft) -> Draft | Drop:
        alert = draft.alert
        group_by = alert.spec.group_by or []
        wait, interval = self._timing(alert)
        labels = group_labels(draft.event, group_by)
        key = self._group_key(alert, labels)
        now = self._now()
        template = draft.notification().to_json()
        ttl = self._group_ttl(wait, interval)
        room = self._room(self._groups, alert, key, self.settings.max_groups)

        def step(group: Group | None) -> tuple[bytes | None, tuple[Group, bool]]:
            current = group if group is not None else Group(labels, now)
            updated = current.add(draft.event, template, now, wait, interval)
            return updated.to_bytes(), (updated, group is None or group.due is None)

        try:
            group, batch = await self._update(key, Group.from_bytes, step, ttl=ttl, create=room)
            if self.state.durable and batch:  # listed for other processes while a batch is pending
                group = await self._list(alert, key, group, ttl)
        except _Full:
            return self._untracked(
                draft, "group", "group_limit", "--noise-max-groups-per-alert", self.settings.max_groups
            )
        except StoreError as exc:
            self._store_failed("group", exc)
            return draft
        self._track(self._groups, alert, key, now + ttl)
        if group.due is not None:
            self._schedule(key, _alert_id(alert), group.due)
        return _drop(Suppressed.GROUPED, draft, "joined a group")

    async def _list(self, alert: Alert, key: str, group: Group, ttl: float) -> Group:
        """Give a new group a slot (its own slot key; the 17-byte counter is written once per
        ``SLOT_BLOCK`` groups); refresh the slot of a group whose new batch starts. Returns the group as
        stored."""
        alert_id = _alert_id(alert)
        if group.slot >= 0:
            await self.state.kv_put(self._slot_key(alert_id, group.slot), key.encode(), ttl=ttl)
            return group

        n = await self._take_slot(alert_id)
        await self.state.kv_put(self._slot_key(alert_id, n), key.encode(), ttl=ttl)

        def mark(stored: Group | None) -> tuple[bytes | None, Group | None]:
            if stored is None or stored.slot >= 0:
                return None, stored
            listed = replace(stored, slot=n)
            return listed.to_bytes(), listed

        listed = await self._update(key, Group.from_bytes, mark, ttl=ttl)
        return listed if listed is not None else group

    async def _take_slot(self, alert_id: str) -> int:
        """The next slot of this process's block, reserving a new block when it is used up: concurrent
        new groups (this process's or another replica's) rarely meet on the counter's compare-and-set.
        Slots reserved and never used are holes the scan skips."""
        start, end = self._reserved.get(alert_id, (0, 0))
        if start >= end:

            def reserve(slots: Slots | None) -> tuple[bytes | None, int]:
                current = slots or Slots()
                return Slots(current.lo, current.hi + SLOT_BLOCK).to_bytes(), current.hi

            start = await self._update(self._slots_key(alert_id), Slots.from_bytes, reserve, ttl=SLOTS_TTL)
            end = start + SLOT_BLOCK
            current = self._reserved.get(alert_id, (0, 0))
            if current[0] < current[1]:  # another task reserved meanwhile: use its block, keep this one
                start, end = current  # (the block reserved here stays a hole)
        self._reserved[alert_id] = (start + 1, end)
        return start

    @staticmethod
    def _group_ttl(wait: float, interval: float) -> float:
        """A group key outlives its longest possible quiet period, then disappears by itself."""
        return wait + 2 * interval + 60.0

    def _schedule(self, key: str, alert_id: str, when: float) -> None:
        current = self._flush_at.at.get(key)
        if current is None or when < current:
            self._flush_at.set(key, when)
        self._owner[key] = alert_id

    def _forget(self, key: str, alert_id: str) -> None:
        self._flush_at.discard(key)
        self._owner.pop(key, None)
        groups = self._groups.get(alert_id)
        if groups is not None:
            groups.discard(key)

    async def flush_due(self) -> int:
        """Send every due group this process knows of; end quiet groups. With a durable store, first
        read some slots for groups other processes opened (``_scan_some``). Returns notifications sent."""
        now = self._now()
        if self.state.durable:
            try:
                await self._scan_some(now)
            except StoreError as exc:
                self._store_failed("group flush", exc)
        sent = 0
        for key in self._flush_at.expired(now, limit=_MAX_GROUPS_PER_TICK):
            alert_id = self._owner.pop(key, "")
            try:
                sent += await self._look(key, alert_id, now)
            except StoreError as exc:
                self._store_failed("group flush", exc)
                self._schedule(key, alert_id, now + self.settings.tick)
        return sent

    async def _look(self, key: str, alert_id: str, now: float) -> int:
        """Flush one group if it is due, and say when to look at it next (or forget it)."""
        namespace, _, name = alert_id.partition("/")
        alert = self.objects.alert(namespace, name)
        if alert is None or alert.spec.group_by is None:
            self._forget(key, alert_id)  # the Alert is gone or no longer groups: its groups expire
            return 0
        if alert.spec.suspend:
            self._schedule(key, alert_id, now + _SUSPENDED_RETRY)
            return 0
        entry = await self.state.kv_get(key)
        if entry is None:
            self._forget(key, alert_id)
            return 0
        wait, interval = self._timing(alert)
        group = Group.from_bytes(entry.value)
        if group.is_due(now):
            sent = await self._flush(key, group, entry.revision, now, wait, interval)
            self._schedule(key, alert_id, now + interval)  # then: the next batch, or the end
            return 1 if sent else 0
        if group.due is not None:
            self._schedule(key, alert_id, group.due)
        elif group.ended(now, interval):
            self._forget(key, alert_id)
        else:
            assert group.last_flush is not None  # not ended without a flush
            self._schedule(key, alert_id, group.last_flush + interval)
        return 0

    async def _scan_some(self, now: float) -> None:
        """Read up to ``SCAN_PER_TICK`` group slots, Alert after Alert (round-robin), each Alert's again
        ``RESCAN_INTERVAL`` after the last of them was read."""
        alerts = [a for a in self.objects.alerts() if a.spec.group_by is not None and not a.spec.suspend]
        budget = SCAN_PER_TICK
        for i in range(len(alerts)):
            turn = (self._scan_turn + i) % len(alerts)
            alert = alerts[turn]
            if now < self._scan_at.get(_alert_id(alert), 0.0):
                continue
            budget -= await self._scan(alert, budget, now)
            if budget <= 0:
                self._scan_turn = turn  # this Alert goes on first next time
                return

    async def _scan(self, alert: Alert, budget: int, now: float) -> int:
        """Read up to ``budget`` of ``alert``'s slots from its cursor; schedule the groups this process
        does not know of (opened before a restart, or by another replica); move the first slot past the
        expired ones. Returns the reads made."""
        alert_id = _alert_id(alert)
        if alert_id not in self._migrated:
            self._migrated.add(alert_id)
            await self._migrate(alert_id)
        slots_key = self._slots_key(alert_id)
        entry = await self.state.kv_get(slots_key)
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
            slot = await self.state.kv_get(self._slot_key(alert_id, n))
            if slot is None:
                if expired_prefix:
                    lo = n + 1
                continue
            expired_prefix = False
            key = slot.value.decode("ascii", "replace")
            if key in self._flush_at or not key.startswith("noise/group/"):
                continue
            group_entry = await self.state.kv_get(key)
            reads += 1
            if group_entry is None:
                continue
            group = Group.from_bytes(group_entry.value)
            when = group.due if group.due is not None else (group.last_flush or group.created)
            self._schedule(key, alert_id, when)
        if lo > slots.lo:  # another writer may have taken a slot meanwhile: then next time
            await self.state.kv_cas(
                slots_key, Slots(lo, slots.hi).to_bytes(), expected=entry.revision, ttl=SLOTS_TTL
            )
        return reads

    async def _migrate(self, alert_id: str) -> None:
        """After an upgrade: schedule the groups of the index an earlier version kept (a value without
        TTL, rewritten with every new group), then let that value expire."""
        legacy_key = "noise/groups/" + digest(alert_id)
        legacy = await self.state.kv_get(legacy_key)
        if legacy is None:
            return
        now = self._now()
        for key in legacy_group_index(legacy.value)[: 4 * self.settings.max_groups]:
            self._schedule(key, alert_id, now)  # ``_look`` reads each: flush, wait or forget
        await self.state.kv_cas(legacy_key, legacy.value, expected=legacy.revision, ttl=RESCAN_INTERVAL)

    async def _flush(
        self, key: str, group: Group, revision: int, now: float, wait: float, interval: float
    ) -> bool:
        try:
            template = Notification.from_json(group.template)
        except ControllerError as exc:  # written by an incompatible version: end the group
            log.error("noise control: dropping an unreadable group: %s", exc)
            await self.state.kv_cas(key, group.flushed(now).to_bytes(), expected=revision, ttl=60.0)
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
        )
        # sent first, then marked: a replica that loses the compare-and-set sent the same id (stored once)
        await self.enqueue(notification)
        await self.state.kv_cas(
            key, group.flushed(now).to_bytes(), expected=revision, ttl=self._group_ttl(wait, interval)
        )
        return True

    async def run(self) -> None:
        """Flush due groups every ``tick`` until cancelled."""
        while True:
            await asyncio.sleep(self.settings.tick)
            try:
                await self.flush_due()
            except Exception as exc:  # never let the flusher die: the next tick tries again
                log.error("noise control: group flush failed: %s", type(exc).__name__)

    # ---- threads (pre-send and post-send) ----------------------------------------------------------------
    @staticmethod
    def _thread_key(delivery: Delivery) -> str | None:
        by = delivery.alert.spec.thread_by
        if by is None or not getattr(delivery.notifier, "threads", False):
            return None  # e.g. incoming webhooks cannot reply in a thread
        event = delivery.event
        if by is ThreadBy.REVISION:
            revision = event.metadata.get("revision", "")
            if not revision:
                return None
            subject = "revision=" + revision
        else:
            subject = "object=" + object_key(event)
        channel = delivery.options.channel
        return "noise/thread/" + digest(_alert_id(delivery.alert), channel, subject)

    async def thread(self, delivery: Delivery) -> Delivery | Drop:
        key = self._thread_key(delivery)
        if key is None:
            return delivery
        try:
            entry = await self.state.kv_get(key)
        except StoreError as exc:
            self._store_failed("thread", exc)
            return delivery
        ts = entry.value.decode("utf-8", "replace") if entry is not None else ""
        return dataclasses.replace(delivery, thread=Thread(key, ts))

    async def thread_started(self, delivery: Delivery) -> None:
        thread = delivery.thread
        if thread is None or thread.ts or not thread.started:
            return
        try:  # first writer wins: a concurrent first message keeps its own thread
            await self.state.kv_cas(thread.key, thread.started.encode(), expected=None, ttl=THREAD_TTL)
        except StoreError as exc:
            self._store_failed("thread", exc)


@dataclass(frozen=True)
class Stage:
    """A named stage (the name shows in logs and in CONTRIBUTING's list)."""

    name: str
    run: Callable[[Draft], Draft | Drop | Awaitable[Draft | Drop]]

    def __call__(self, draft: Draft, /) -> Draft | Drop | Awaitable[Draft | Drop]:
        return self.run(draft)


@dataclass(frozen=True)
class AsyncStage:
    name: str
    run: Callable[[Delivery], Coroutine[Any, Any, Delivery | Drop]]

    def __call__(self, delivery: Delivery, /) -> Coroutine[Any, Any, Delivery | Drop]:
        return self.run(delivery)  # its coroutine as is: no second one around it per delivery


@dataclass(frozen=True)
class AfterStage:
    name: str
    run: Callable[[Delivery], Coroutine[Any, Any, None]]

    def __call__(self, delivery: Delivery, /) -> Coroutine[Any, Any, None]:
        return self.run(delivery)

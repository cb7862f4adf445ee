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

Grouping keeps each group in its own key and the Alert's open groups in an index key; ``run`` (one task
per process) flushes due groups every ``tick``. A flushed group's notification id is derived from the
group and its flush count, so two replicas flushing the same batch write one outbox item.

``threadBy`` is a pre-send stage (it reads the thread of the key) and a post-send one (it remembers the
thread a delivery started); it applies to notifiers whose ``threads`` is true (Slack's chat.postMessage
with a bot token).

When the store cannot be reached, a stage lets the notification through (``StoreError`` is logged and
counted): a notification too many is better than one lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from ..api.alert import Alert, NotifyOn, ThreadBy
from ..core.clock import Clock
from ..core.noise import (
    OCCURRENCES,
    Arrivals,
    Group,
    GroupIndex,
    ObjectState,
    StateDecision,
    Suppressed,
    ThresholdDecision,
    describe_threshold,
    digest,
    group_labels,
    identity,
    object_key,
    recovery_event,
    state_step,
    threshold_step,
)
from ..errors import ControllerError, StoreError
from ..lib.duration import parse_duration
from ..providers.message import Message, Thread
from ..sandbox import SandboxFailure, SandboxPool
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

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class NoiseSettings:
    tick: float = 1.0
    """Seconds between two looks for due groups (a group goes out at most this late)."""


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
        sandbox: SandboxPool | None = None,
    ) -> None:
        self.sandbox = sandbox  # spec.filter beyond the inline-safe subset runs there (``filter``)
        self.state = state
        self.objects = objects
        self.clock = clock
        self.enqueue = enqueue
        self.settings = settings or NoiseSettings()
        self.warn = warn or (lambda alert, reason, message: None)
        self.store_errors = 0

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
        ttl: float | None,
    ) -> R:
        """Read ``key``, compute (new bytes or None for no write, result), compare-and-set; retry on a
        concurrent writer. Raises ``StoreError``."""
        for _ in range(CAS_ATTEMPTS):
            entry = await self.state.kv_get(key)
            value = decode(entry.value) if entry is not None else None
            new, result = step(value)
            if new is None:
                return result
            written = await self.state.kv_cas(
                key, new, expected=entry.revision if entry is not None else None, ttl=ttl
            )
            if written is not None:
                return result
        raise StoreError(f"noise control: {CAS_ATTEMPTS} concurrent writers on one key")

    def _store_failed(self, stage: str, exc: StoreError) -> None:
        self.store_errors += 1
        log.warning("noise control %s: state store unavailable, notifying anyway: %s", stage, exc)

    # ---- 1. filter -------------------------------------------------------------------------------------
    def filter(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        """``spec.filter`` (CEL, variable ``event``). An inline-safe expression (no comprehension, no
        growing call: ``Expression.inline_safe``) is evaluated here, on the loop (~5 µs). Any other one
        runs in the sandbox's worker processes (bounded in time and memory): with the memory store as
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
        key = "noise/threshold/" + digest(_alert_id(draft.alert), object_key(draft.event))

        def step(state: Arrivals | None) -> tuple[bytes | None, ThresholdDecision]:
            decision = threshold_step(state, now, count, within)
            return decision.state.to_bytes(), decision

        try:
            decision = await self._update(key, Arrivals.from_bytes, step, ttl=within)
        except StoreError as exc:
            self._store_failed("threshold", exc)
            return draft
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
        key = "noise/state/" + digest(_alert_id(draft.alert), object_key(draft.event))

        def step(previous: ObjectState | None) -> tuple[bytes | None, StateDecision]:
            decision = state_step(previous, draft.event, now)
            return (decision.state.to_bytes() if decision.state is not None else None), decision

        try:
            decision = await self._update(key, ObjectState.from_bytes, step, ttl=None)
        except StoreError as exc:
            self._store_failed("state change", exc)
            return draft
        if not decision.send:
            return _drop(Suppressed.STATE, draft, f"still {draft.event.severity or 'info'}")
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
        key = "noise/repeat/" + digest(_alert_id(draft.alert), identity(draft.event))
        try:
            seen = await self.state.seen(key, parse_duration(interval))
        except StoreError as exc:
            self._store_failed("repeat", exc)
            return draft
        if seen:
            return _drop(Suppressed.REPEAT, draft, f"identical notification sent less than {interval} ago")
        return draft

    # ---- 5. group --------------------------------------------------------------------------------------
    def group(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if draft.alert.spec.group_by is None:
            return draft
        return self._group(draft)

    def _group_key(self, alert: Alert, labels: tuple[tuple[str, str], ...]) -> str:
        return "noise/group/" + digest(_alert_id(alert), *(f"{k}={v}" for k, v in labels))

    @staticmethod
    def _index_key(alert: Alert) -> str:
        return "noise/groups/" + digest(_alert_id(alert))

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

        def step(group: Group | None) -> tuple[bytes | None, bool]:
            current = group if group is not None else Group(labels, now)
            updated = current.add(draft.event, template, now, wait, interval)
            return updated.to_bytes(), group is None

        try:
            created = await self._update(key, Group.from_bytes, step, ttl=self._group_ttl(wait, interval))
            if created:
                await self._index(alert, add=key)
        except StoreError as exc:
            self._store_failed("group", exc)
            return draft
        return _drop(Suppressed.GROUPED, draft, "joined a group")

    @staticmethod
    def _group_ttl(wait: float, interval: float) -> float:
        """A group key outlives its longest possible quiet period, then disappears by itself."""
        return wait + 2 * interval + 60.0

    async def _index(self, alert: Alert, *, add: str = "", remove: frozenset[str] = frozenset()) -> None:
        def step(index: GroupIndex | None) -> tuple[bytes | None, None]:
            keys = (index.keys if index is not None else frozenset()) - remove
            if add:
                keys |= {add}
            if index is not None and keys == index.keys:
                return None, None
            return GroupIndex(frozenset(keys)).to_bytes(), None

        await self._update(self._index_key(alert), GroupIndex.from_bytes, step, ttl=None)

    async def flush_due(self) -> int:
        """Send every due group of every grouping Alert; end quiet groups. Returns notifications sent."""
        sent = 0
        for alert in self.objects.alerts():
            if alert.spec.group_by is None or alert.spec.suspend:
                continue
            try:
                sent += await self._flush_alert(alert)
            except StoreError as exc:
                self._store_failed("group flush", exc)
            if sent >= _MAX_GROUPS_PER_TICK:
                break
        return sent

    async def _flush_alert(self, alert: Alert) -> int:
        entry = await self.state.kv_get(self._index_key(alert))
        if entry is None:
            return 0
        wait, interval = self._timing(alert)
        now = self._now()
        ended: set[str] = set()
        sent = 0
        for key in sorted(GroupIndex.from_bytes(entry.value).keys):
            group_entry = await self.state.kv_get(key)
            if group_entry is None:
                ended.add(key)
                continue
            group = Group.from_bytes(group_entry.value)
            if group.is_due(now):
                if await self._flush(key, group, group_entry.revision, now, wait, interval):
                    sent += 1
            elif group.ended(now, interval):
                ended.add(key)
        if ended:
            await self._index(alert, remove=frozenset(ended))
        return sent

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

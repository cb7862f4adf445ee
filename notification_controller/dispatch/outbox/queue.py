"""The durable outbox as the dispatcher's ``Queue`` (``--store=sqlite:…`` or ``nats://…``; docs/delivery.md).

``DurableOutbox`` is what the dispatcher queues into instead of the in-process lanes: ``enqueue`` appends
one event's notifications to the store in one call (the event server answers 202 only after it returned)
and wakes their lanes. Its ``OutboxRunner`` (``runner.py``) leases them back and calls ``_deliver``:
decode, count the attempt, and hand the notification to the ``Deliverer`` with its id as the
``Idempotency-Key``. It knows the deliverer's ``deliver`` function, never the dispatcher. Given-up
notifications become dead letters: counted, logged, and a Warning Event
``NotificationDeadLettered`` on the Alert; a lane paused by its circuit breaker is a Warning Event
``DeliveryPaused`` on the Provider (``DeliveryResumed`` when it recovers) and a gauge.

**Hand-off** (issue 29 item 4): with a store that appends and leases in one transaction (SQLite), the
notifications of an event whose lane has a free worker are appended already leased to it (``reserve``,
``append_held``, ``start_held``): the worker delivers the ``Notification`` it was given, without a
``lease`` round trip or decoding the stored payload. The 202 still waits for the commit; a held item of a
killed process is delivered again once its lease runs out, as one killed in delivery.

The history (``Reporter.history``): an attempt that will be retried is recorded ``retrying`` (the runner's
``on_retry``: the delay is in the detail), a dead letter ``dead_lettered`` with its last attempt's answer
(kept from ``_deliver`` until the runner decides: at most ``MAX_UNSETTLED`` results, by lease id).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from ...errors import ControllerError
from ...history.model import Outcome
from ...lib.clock import Clock
from ...logsetup import fields, object_fields
from ...metrics import DeliveryMetrics
from ...objects.base import ObjectRef, ObjectStore
from ...store.base import HeldAppend, LaneStats, Lease, NewItem, Store
from ..model import DeliveryOutcome, Notification, Result
from ..report import Reporter
from .breaker import BreakerState
from .policy import DurableSettings
from .runner import OutboxRunner

Deliver = Callable[..., Awaitable[Result]]
"""``Deliverer.deliver(notification, idempotency_key=…)``."""

log = logging.getLogger(__name__)

MAX_UNSETTLED = 10_000
"""Failed attempts' results kept until the runner retries or dead-letters them (history only)."""
MAX_RECENT = 10_000
"""Notifications this process appended, kept decoded by id until their first attempt, so that a worker
does not decode what the dispatcher has just encoded (the stored payload is decoded for the older ones, for
redeliveries and for other replicas' items). The memory lanes' default ``--max-pending-notifications``:
the memory a backlog may hold here is what the memory store would hold."""


class DurableOutbox:
    def __init__(
        self,
        store: Store,
        deliver: Deliver,
        objects: ObjectStore,
        report: Reporter,
        metrics: DeliveryMetrics,
        settings: DurableSettings,
        *,
        clock: Clock | None = None,
        on_paused: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.deliver = deliver
        self.objects = objects
        self.report = report
        self.metrics = metrics
        self.clock = clock
        self.runner = OutboxRunner(
            store,
            self._deliver,
            settings,
            clock=clock,
            on_dead_letter=self._dead_lettered,
            on_breaker=self._breaker_changed,
            on_stats=self._stats,
            on_retry=self._retrying if report.history is not None else None,
        )
        self._unsettled: OrderedDict[str, Result] = OrderedDict()
        self._recent: OrderedDict[str, Notification] = OrderedDict()
        # a backend that appends and leases in one transaction (InstrumentedStore.holds: its backend does)
        self._holding = (
            store.append_held if isinstance(store, HeldAppend) and getattr(store, "holds", True) else None
        )
        self._gauged: set[str] = set()
        self.on_paused = on_paused
        """Called with a lane (``namespace/name``) whose breaker opened or closed (the app requests a
        Provider reconcile so its status says it: ``paused``)."""

    durable = True
    pending = 0  # what is stored waits in the store, not in this process

    async def enqueue(self, notifications: Sequence[Notification], /) -> None:
        """Store every notification of one event (one transaction where the backend has them)."""
        items = [NewItem(n.id, n.lane, n.to_json()) for n in notifications]
        runner = self.runner
        hold = [runner.reserve(n.lane) for n in notifications] if self._holding is not None else []
        if any(hold):
            await self._append_held(notifications, items, hold)
        else:
            await self.store.append(items)
        recent = self._recent
        for n in notifications:
            self.report.of(n.provider_type).notifications.inc()
            recent[n.id] = n
        while len(recent) > MAX_RECENT:
            recent.popitem(last=False)
        for n, held in itertools.zip_longest(notifications, hold):
            if not held:
                runner.wake(n.lane)

    async def _append_held(
        self, notifications: Sequence[Notification], items: list[NewItem], hold: list[bool]
    ) -> None:
        runner = self.runner
        assert self._holding is not None
        try:
            leases = await self._holding(items, hold)
        except BaseException:  # not stored (or, cancelled, maybe stored: its lease runs out)
            for n, held in zip(notifications, hold, strict=True):
                if held:
                    runner.unreserve(n.lane)
            raise
        given = {lease.id: lease for lease in leases}
        for n, held in zip(notifications, hold, strict=True):
            if not held:
                continue
            lease = given.get(n.id)
            if lease is None:  # already in the outbox: not ours to deliver
                runner.unreserve(n.lane)
                continue
            self._recent[n.id] = n  # before the worker starts (the loop runs it later)
            runner.start_held(n.lane, lease)

    def close(self) -> None:
        """Nothing to refuse: an event the server still answers is stored."""

    async def wait_idle(self, timeout: float | None = None) -> bool:
        return True  # what is stored is not pending in this process: a lease runs out, another delivers it

    async def shutdown(self, grace: float) -> int:
        """Stop leasing; attempts in flight finish within ``grace`` or their leases run out (kept, never
        abandoned)."""
        await self.runner.stop(grace=grace)
        return 0

    async def _deliver(self, lease: Lease) -> Result:
        notification = self._recent.pop(lease.id, None) if lease.attempts == 1 else None
        if notification is None:
            try:
                notification = Notification.from_json(lease.payload)
            except ControllerError as exc:  # written by an incompatible version: keep it, do not retry
                return Result(DeliveryOutcome.PERMANENT, str(exc))
        ptype = notification.provider_type
        self.metrics.attempts.labels(provider_type=ptype).inc()
        if lease.attempts > 1:
            self.metrics.redeliveries.labels(provider_type=ptype).inc()
        if notification.attempt != lease.attempts:
            notification = dataclasses.replace(notification, attempt=lease.attempts)
        result = await self.deliver(notification, idempotency_key=notification.id)
        if self.report.history is not None and (
            result.outcome is DeliveryOutcome.RETRY or result.outcome is DeliveryOutcome.PERMANENT
        ):
            self._unsettled[lease.id] = result  # the runner decides: retry or dead letter
            if len(self._unsettled) > MAX_UNSETTLED:
                self._unsettled.popitem(last=False)
        if result.outcome is DeliveryOutcome.DELIVERED and self.clock is not None:
            age = self.clock.now().timestamp() - lease.enqueued_at
            self.report.of(ptype).duration.observe(max(0.0, age))
        return result

    def _retrying(self, lease: Lease, result: Result, delay: float) -> None:
        self._unsettled.pop(lease.id, None)
        try:
            notification = Notification.from_json(lease.payload)
        except ControllerError:
            return
        detail = f"attempt {lease.attempts} failed, next in {delay:.1f}s: {result.error}"
        self.report.record(
            Outcome.RETRYING, notification, detail=detail, result=result, attempt=lease.attempts
        )

    def _dead_lettered(self, lease: Lease, reason: str, error: str) -> None:
        try:
            notification: Notification | None = Notification.from_json(lease.payload)
        except ControllerError:
            notification = None
        ptype = notification.provider_type if notification else ""
        self.report.dead_letter(self.metrics.dead_letters, ptype, lease.provider, reason)
        last = self._unsettled.pop(lease.id, None)
        if notification is not None and self.report.history is not None:
            self.report.record(
                Outcome.DEAD_LETTERED,
                notification,
                stage=reason,
                detail=error,
                result=last,
                attempt=lease.attempts if last is not None else max(lease.attempts - 1, 0),
            )
        what = notification.event.involved_object.describe() if notification else lease.id
        message = (
            f"notification for {what} kept as dead letter {lease.id} after {lease.attempts} attempts "
            f"({reason}): {error}"
        )
        alert = None
        if notification is not None:
            alert = self.objects.alert(notification.alert.namespace, notification.alert.name)
        keys: dict[str, object] = {"provider": lease.provider, "reason": reason, "error": error}
        if notification is not None:
            ref = notification.alert
            keys = object_fields("Alert", ref.namespace, ref.name, **keys)
        log.error("%s (provider %s)", message, lease.provider, extra=fields(**keys))
        if alert is not None:
            self.report.warn(alert, "NotificationDeadLettered", message, logged=True)

    def paused(self, lane: str) -> str | None:
        """Why ``lane`` is paused by its circuit breaker on this replica, or None."""
        breaker = self.runner.breaker(lane)
        if breaker is None or breaker.state is BreakerState.CLOSED:
            return None
        return (
            f"delivery paused by the circuit breaker after {breaker.failures} consecutive failures; "
            "one probe at a time until it succeeds"
        )

    def _breaker_changed(self, lane: str, state: BreakerState) -> None:
        paused = state is not BreakerState.CLOSED
        self.metrics.breaker_open.labels(provider=lane).set(1 if paused else 0)
        if self.on_paused is not None:
            self.on_paused(lane)
        namespace, _, name = lane.partition("/")
        provider = self.objects.provider(namespace, name)
        if provider is None:
            return
        breaker = self.runner.breaker(lane)
        if paused:
            message = (
                f"delivery paused after {breaker.failures if breaker else '?'} consecutive failures; "
                "one probe at a time until it succeeds"
            )
            self.report.event(ObjectRef.of(provider), "Warning", "DeliveryPaused", message)
        else:
            self.report.event(ObjectRef.of(provider), "Normal", "DeliveryResumed", "delivery resumed")

    def _stats(self, stats: dict[str, LaneStats]) -> None:
        for lane, lane_stats in stats.items():
            self.metrics.outbox_depth.labels(provider=lane).set(lane_stats.depth)
            self.metrics.outbox_oldest.labels(provider=lane).set(lane_stats.oldest_age)
        for lane in self._gauged - stats.keys():  # drained lanes read 0, not their last depth
            self.metrics.outbox_depth.labels(provider=lane).set(0)
            self.metrics.outbox_oldest.labels(provider=lane).set(0)
        self._gauged = set(stats)

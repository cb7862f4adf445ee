"""At-least-once delivery from a durable outbox (``--store=sqlite:…`` or ``nats://…``): issue 13.

With the ``memory`` store the dispatcher keeps Flux's contract (one delivery attempt, then forget). With a
durable store every notification is appended to the store's outbox before the event server answers 202,
and this module drains the outbox:

* one **lane per Provider key**, up to ``concurrency`` workers each, as the in-memory lanes; a worker
  *leases* the next due item, hands it to ``deliver`` and then acknowledges it, NAKs it with a delay, or
  moves it to the dead letters. A replica killed while it holds a lease loses nothing: the lease runs out
  and the item is due again (on NATS, on any replica);
* **backoff with jitter** between attempts (``RedeliveryPolicy``: ``lib.backoff``'s doubling from ``base`` up to ``cap``, half of
  each delay random so that a recovered provider is not hit by every lane at once), and a provider's
  ``Retry-After`` honoured when it asks for longer;
* a **circuit breaker** per lane (``CircuitBreaker``): after ``threshold`` consecutive failures the lane
  stops leasing for a cool-down, then lets a single probe through; the probe's success closes it;
* items older than ``max_age`` (``--delivery-max-age``) and permanent failures become **dead letters**.

Which lanes have work is learnt from ``Store.stats()`` every ``poll_interval`` (other replicas append too)
and, for what this process appends, at once through ``wake``. Everything here is owned and stopped by
``stop``; time is injected.

With a ``BatchOutbox`` store (SQLite) leases and acks go in batches, and an item appended
for a free worker is handed to it leased (``batches.py``, issue 29 item 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from ...errors import StoreError
from ...lib.clock import Clock, SystemClock
from ...store.base import BatchOutbox, LaneStats, Lease, Store
from ..model import DeliveryOutcome, Result
from .batches import Coalescer, HandOff, Lane
from .breaker import BreakerState, CircuitBreaker
from .policy import DurableSettings

log = logging.getLogger(__name__)

MAX_REMEMBERED_ERRORS = 10_000

Deliver = Callable[[Lease], Awaitable[Result]]


DeadLetterHook = Callable[[Lease, str, str], None]
"""Called after an item was dead-lettered: (lease, reason, masked error) → Warning Event, metric."""

BreakerHook = Callable[[str, BreakerState], None]
"""Called when a lane's breaker changes state (metric, log, Provider status)."""

RetryHook = Callable[[Lease, Result, float], None]
"""Called when a failed attempt is to be retried: (lease, its result, seconds until the next) → history."""

StatsHook = Callable[[dict[str, LaneStats]], None]
"""Called with every poll's depth and oldest age per lane (gauges)."""


class OutboxRunner(HandOff):
    """Drains a durable ``Store``'s outbox through ``deliver``; see the module docstring."""

    def __init__(
        self,
        store: Store,
        deliver: Deliver,
        settings: DurableSettings | None = None,
        *,
        clock: Clock | None = None,
        on_dead_letter: DeadLetterHook | None = None,
        on_breaker: BreakerHook | None = None,
        on_store_error: Callable[[str], None] | None = None,
        on_stats: StatsHook | None = None,
        on_retry: RetryHook | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.deliver = deliver
        self.settings = settings or DurableSettings()
        self.concurrency = self.settings.concurrency
        self.clock = clock or SystemClock()
        self._on_dead_letter = on_dead_letter
        self._on_breaker = on_breaker
        self._on_store_error = on_store_error
        self._on_stats = on_stats
        self._on_retry = on_retry
        self._rng = rng or random.Random()
        self._lanes: dict[str, Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._woken: set[str] = set()
        self._running = False
        self._supervisor: asyncio.Task[None] | None = None
        self._last_errors: OrderedDict[str, str] = OrderedDict()  # id → last error, for a later max-age
        self._batches = isinstance(store, BatchOutbox) and bool(getattr(store, "batches", True))
        self._ack = Coalescer(self._ack_many, None, self._own) if self._batches else None
        self.attempts = 0
        self.store_errors = 0

    # ---- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._supervisor is None:
            self._running = True
            self._supervisor = asyncio.get_running_loop().create_task(self._supervise())

    async def stop(self, grace: float = 5.0) -> None:
        """Stop leasing; let attempts in flight finish within ``grace`` seconds, then cancel them (their
        leases run out and the items are delivered again later: nothing is lost)."""
        self._running = False
        self._wake.set()
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
            self._supervisor = None
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    def wake(self, provider: str) -> None:
        """This process appended to ``provider``'s lane: start its workers without waiting for the poll."""
        self._woken.add(provider)
        self._wake.set()
        lane = self._lanes.get(provider)
        if lane is not None:
            lane.appended += 1

    def breaker(self, provider: str) -> CircuitBreaker | None:
        lane = self._lanes.get(provider)
        return lane.breaker if lane is not None else None

    @property
    def busy(self) -> bool:
        return any(not t.done() for t in self._tasks)

    # ---- supervision -----------------------------------------------------------------------------------
    async def _supervise(self) -> None:
        poll_at = 0.0
        while self._running:
            now = self.clock.monotonic()
            keys = set(self._woken)
            self._woken.clear()
            if now >= poll_at:
                poll_at = now + self.settings.poll_interval
                try:
                    stats = await self.store.stats()
                except StoreError as exc:
                    self._store_error("stats", exc)
                else:
                    keys.update(k for k, s in stats.items() if s.depth)
                    if self._on_stats is not None:
                        self._on_stats(stats)
            for key in keys:
                self._fill(key)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.01, poll_at - self.clock.monotonic()))

    def _new_lane(self, key: str) -> Lane:
        breaker = CircuitBreaker(
            self.clock, threshold=self.settings.breaker_threshold, cooldown=self.settings.breaker_cooldown
        )
        store = self.store
        if not self._batches or not isinstance(store, BatchOutbox):
            return Lane(breaker, None)
        return Lane(breaker, Coalescer(lambda wanting: store.lease_many(key, len(wanting)), None, self._own))

    async def _ack_many(self, leases: list[Lease]) -> list[None]:
        assert isinstance(self.store, BatchOutbox)
        await self.store.ack_many(leases)
        return []

    def _fill(self, key: str) -> None:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = self._new_lane(key)
        lane.appended += 1
        # open: one worker waits for the cool-down, then probes; closed: the lane's full concurrency
        wanted = self.settings.concurrency if lane.breaker.state is BreakerState.CLOSED else 1
        while self._running and lane.workers < wanted:
            lane.workers += 1
            task = asyncio.get_running_loop().create_task(self._work(key, lane))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _work(self, key: str, lane: Lane, held: Lease | None = None) -> None:
        try:
            if held is not None:
                if lane.breaker.allow():
                    await self._attempt(key, lane, held)
                else:  # the breaker opened since the slot was reserved: due again at once, not delivered
                    await self._settle("nack", self.store.nack(held, delay=0.0))
                if not lane.backlog:  # nothing else known to be due: the slot is free again
                    return
            while self._running:
                breaker = lane.breaker
                if not breaker.allow():
                    if breaker.state is BreakerState.OPEN:
                        await asyncio.sleep(max(0.01, breaker.reopens_in))
                        continue
                    return  # half-open and another worker is the probe
                asked = lane.appended
                try:
                    lease = await (lane.leases(None) if lane.leases else self.store.lease(key))
                except StoreError as exc:
                    breaker.release()
                    self._store_error("lease", exc)
                    await asyncio.sleep(self.settings.poll_interval)
                    continue
                if lease is None:
                    breaker.release()
                    lane.drained = max(lane.drained, asked)
                    return
                await self._attempt(key, lane, lease)
        finally:
            self._left(key, lane)

    async def _attempt(self, key: str, lane: Lane, lease: Lease) -> None:
        age = self.clock.now().timestamp() - lease.enqueued_at
        if age > self.settings.max_age:
            lane.breaker.release()
            last = self._last_errors.pop(lease.id, "")  # known if this replica made the last attempt
            why = f"not delivered within {self.settings.max_age:g}s"
            await self._dead(lease, "max-age", f"{why}: {last}" if last else why)
            return
        self.attempts += 1
        try:
            result = await self.deliver(lease)
        except asyncio.CancelledError:
            raise  # shutdown: the lease runs out, the item is delivered later
        except Exception as exc:  # a bug in deliver must not lose the item or kill the lane
            log.error("delivery of %s raised %s", lease.id, type(exc).__name__)
            result = Result(DeliveryOutcome.RETRY, f"internal error: {type(exc).__name__}")
        breaker = lane.breaker
        if result.outcome is DeliveryOutcome.RETRY:
            if breaker.failure():
                self._breaker_changed(key, breaker)
            delay = self.settings.retry.delay(lease.attempts, result.retry_after, self._rng)
            if age + delay > self.settings.max_age:
                await self._dead(lease, "max-age", result.error)
                return
            self._last_errors[lease.id] = result.error
            self._last_errors.move_to_end(lease.id)
            if len(self._last_errors) > MAX_REMEMBERED_ERRORS:
                self._last_errors.popitem(last=False)
            if self._on_retry is not None:
                self._on_retry(lease, result, delay)
            await self._settle("nack", self.store.nack(lease, delay=delay))
            return
        self._last_errors.pop(lease.id, None)
        was_open = breaker.state is not BreakerState.CLOSED
        breaker.success()
        if was_open:
            self._breaker_changed(key, breaker)
        if result.outcome is DeliveryOutcome.PERMANENT:
            await self._dead(lease, "permanent", result.error)
        else:
            await self._settle("ack", self._ack(lease) if self._ack else self.store.ack(lease))

    async def _dead(self, lease: Lease, reason: str, error: str) -> None:
        if await self._settle("dead_letter", self.store.dead_letter(lease, reason=reason, error=error)):
            if self._on_dead_letter is not None:
                self._on_dead_letter(lease, reason, error)

    async def _settle(self, operation: str, call: Awaitable[None]) -> bool:
        """Ack/NAK/dead-letter; on a store error the lease simply runs out (redelivery, never loss)."""
        try:
            await call
        except StoreError as exc:
            self._store_error(operation, exc)
            return False
        return True

    def _store_error(self, operation: str, exc: StoreError) -> None:
        self.store_errors += 1
        log.warning("outbox %s failed: %s", operation, exc)
        if self._on_store_error is not None:
            self._on_store_error(operation)

    def _breaker_changed(self, key: str, breaker: CircuitBreaker) -> None:
        if breaker.state is BreakerState.OPEN:
            log.warning(
                "provider %s: %d consecutive delivery failures, pausing its lane for %.0fs",
                key,
                breaker.failures,
                breaker.reopens_in,
            )
        else:
            log.info("provider %s: delivery recovered, lane resumed", key)
        if self._on_breaker is not None:
            self._on_breaker(key, breaker.state)

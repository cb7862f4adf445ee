"""A work queue with client-go ``workqueue`` semantics, on asyncio.

Reconcilers are level-based: what matters is that every key changed since its last reconcile gets
reconciled again, never that every change is seen. The queue guarantees (checklist D11, D12):

* a key is handed to at most one worker at a time;
* adding a key that is already queued is a no-op (1000 adds = one reconcile);
* adding a key that is being processed marks it *dirty*: it is queued again once ``done`` is called,
  so the change that arrived during the reconcile is not lost;
* ``add_after`` delays an add (the earliest pending deadline wins, as in client-go's delaying queue);
* ``add_rate_limited`` delays by a per-key exponential backoff (``min_retry_delay`` × 2^failures,
  capped at ``max_retry_delay``) until ``forget`` resets it. Delayed keys wait in timers, not in
  workers, so one key failing forever never starves the others.

Time is the running event loop's clock (``loop.time`` / ``loop.call_at``): tests run under
``looptime`` and fast-forward minutes of backoff without real waiting.

With ``metrics`` (``controllers.metrics.QueueMetrics``) the queue feeds client-go's ``workqueue_*`` series
at the same points as client-go does (add, get, done, every ``add_after`` as a retry).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

from ..settings import KubeSettings

if TYPE_CHECKING:
    from .metrics import QueueMetrics

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

DEFAULT_MIN_RETRY_DELAY = KubeSettings.min_retry_delay  # --min-retry-delay (settings.py)
DEFAULT_MAX_RETRY_DELAY = KubeSettings.max_retry_delay

YIELD_AFTER = 0.01
"""Seconds the workers may reconcile key after key, together, before they let the loop run (issue 17).
A reconcile that never waits (local mode: the cluster is in memory) would otherwise keep its worker on the
loop until the queue is empty: 10,000 Alerts at start-up held ``/readyz`` and the event server for seconds.
A queue that drains within that time is processed as before, in one go (at a small start-up, every
Provider before the Alerts that use them); a reconcile that waits on the API server yields anyway."""


class LoopBudget:
    """The time reconcile workers may take in one turn of the event loop, all of them together.

    A budget per worker let each of the twelve workers (three kinds × ``--concurrent``) take its 10 ms in
    turn: ~0.1 s between two polls of the sockets, and a request to ``/readyz`` needs a few turns (accept,
    read, answer), so the first reconcile of 10,000 Alerts held Ready ~0.3 s after the load (issue 17).
    Shared, the turn's first ``spent`` starts the clock and the next turn resets it."""

    def __init__(self, seconds: float = YIELD_AFTER) -> None:
        self.seconds = seconds
        self._since: float | None = None

    def spent(self) -> bool:
        """True once this turn of the loop ran reconciles for ``seconds``: the caller should yield."""
        now = time.monotonic()
        if self._since is None:
            self._since = now
            asyncio.get_running_loop().call_soon(self._next_turn)
            return False
        return now - self._since >= self.seconds

    def _next_turn(self) -> None:
        self._since = None

    async def pace(self) -> None:
        """Yield to the loop until a turn with budget left (each worker woken in the next turn asks again:
        the first one gets it)."""
        while self.spent():  # noqa: ASYNC110 - waits for the loop's next turn, not for an event
            await asyncio.sleep(0)


class WorkQueue(Generic[K]):
    """Deduplicating, delaying, rate-limited work queue (see the module docstring)."""

    def __init__(
        self,
        name: str = "",
        *,
        min_retry_delay: float = DEFAULT_MIN_RETRY_DELAY,
        max_retry_delay: float = DEFAULT_MAX_RETRY_DELAY,
        metrics: QueueMetrics | None = None,
        budget: LoopBudget | None = None,
    ) -> None:
        if min_retry_delay <= 0 or max_retry_delay < min_retry_delay:
            raise ValueError("retry delays must satisfy 0 < min_retry_delay <= max_retry_delay")
        self.name = name
        self.min_retry_delay = min_retry_delay
        self.max_retry_delay = max_retry_delay
        self._queue: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._delayed: dict[K, asyncio.TimerHandle] = {}
        self._failures: dict[K, int] = {}
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._shutting_down = False
        self.metrics = metrics
        self.budget = budget if budget is not None else LoopBudget()  # shared by the queues of a manager

    # ---- adding -----------------------------------------------------------------------------------
    def add(self, key: K) -> None:
        """Queue ``key`` unless it is queued already; if it is in flight, process it once more after."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if self.metrics is not None:
            self.metrics.added(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wakeup_getter()

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; an earlier pending deadline for the same key wins."""
        if self._shutting_down:
            return
        if self.metrics is not None:
            self.metrics.retried()
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        pending = self._delayed.get(key)
        if pending is not None:
            if pending.when() <= when:
                return
            pending.cancel()
        self._delayed[key] = loop.call_at(when, self._fire, key)

    def add_rate_limited(self, key: K) -> float:
        """Add ``key`` after its next backoff delay; returns that delay (seconds)."""
        delay = self.next_backoff(key)
        self._failures[key] = self._failures.get(key, 0) + 1
        self.add_after(key, delay)
        return delay

    def next_backoff(self, key: K) -> float:
        failures = self._failures.get(key, 0)
        if failures >= 64:  # 2**64 × anything positive is past any cap; avoid float overflow
            return self.max_retry_delay
        return min(self.min_retry_delay * (2.0**failures), self.max_retry_delay)

    def forget(self, key: K) -> None:
        """Reset the backoff of ``key`` (after a successful reconcile)."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def cancel_delayed(self, key: K) -> None:
        """Drop a pending delayed add (the object is gone)."""
        handle = self._delayed.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _fire(self, key: K) -> None:
        self._delayed.pop(key, None)
        self.add(key)

    # ---- consuming --------------------------------------------------------------------------------
    async def get(self) -> K | None:
        """The next key to process (now marked in flight), or ``None`` once the queue shuts down."""
        loop = asyncio.get_running_loop()
        while not self._queue:
            if self._shutting_down:
                return None
            waiter: asyncio.Future[None] = loop.create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):
                    self._getters.remove(waiter)
                if waiter.done() and not waiter.cancelled() and self._queue:
                    self._wakeup_getter()  # we were woken for an item: pass the wake-up on
                raise
        if self._shutting_down:
            return None
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        if self.metrics is not None:
            self.metrics.got(key)
        return key

    def done(self, key: K) -> None:
        """Mark ``key`` as processed; if it was added meanwhile, queue it again."""
        if self.metrics is not None and key in self._processing:
            self.metrics.done(key)
        self._processing.discard(key)
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._wakeup_getter()
        if not self._processing:
            for waiter in self._idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._idle_waiters.clear()

    def _wakeup_getter(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    # ---- introspection ----------------------------------------------------------------------------
    def __len__(self) -> int:
        """Keys ready to be processed (not counting delayed or in-flight ones)."""
        return len(self._queue)

    @property
    def in_flight(self) -> frozenset[K]:
        return frozenset(self._processing)

    @property
    def delayed(self) -> frozenset[K]:
        return frozenset(self._delayed)

    def is_queued(self, key: K) -> bool:
        return key in self._dirty

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # ---- workers and shutdown ---------------------------------------------------------------------
    async def run(self, handler: Callable[[K], Awaitable[None]], *, workers: int = 4) -> None:
        """Process keys with ``workers`` concurrent tasks until ``shutdown``.

        ``handler`` decides about requeues (``add_after``, ``add_rate_limited``, ``forget``). An exception
        escaping it is logged and the key is retried with backoff: a worker never dies of a bad object.
        """
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._workers = [
            asyncio.create_task(self._worker(handler), name=f"workqueue-{self.name}-{i}")
            for i in range(workers)
        ]
        try:
            # return_exceptions: workers cancelled by ``shutdown`` end ``run`` normally; cancelling ``run``
            # itself still cancels the gather (and so every worker).
            await asyncio.gather(*self._workers, return_exceptions=True)
        finally:
            for task in self._workers:
                task.cancel()
            await asyncio.gather(*self._workers, return_exceptions=True)

    async def _worker(self, handler: Callable[[K], Awaitable[None]]) -> None:
        while True:
            key = await self.get()
            if key is None:
                return
            try:
                await self.budget.pace()  # see LoopBudget (the key waits in flight for the next turn)
                await handler(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "workqueue %s: unhandled error processing %r; retrying with backoff", self.name, key
                )
                self.add_rate_limited(key)
            finally:
                self.done(key)

    async def shutdown(self, deadline: float | None = None) -> bool:
        """Stop: refuse new keys, drop queued and delayed ones, let in-flight keys finish.

        Waits up to ``deadline`` seconds (None = forever) for in-flight work, then cancels the workers.
        Returns True if every in-flight reconcile finished on its own. Dropping queued keys is safe for a
        level-based controller: the next start lists everything again.
        """
        self._shutting_down = True
        for handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        if self.metrics is not None:
            self.metrics.dropped(len(self._dirty))
        self._queue.clear()
        self._dirty.clear()
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        drained = True
        if self._processing:
            loop = asyncio.get_running_loop()
            idle: asyncio.Future[None] = loop.create_future()
            self._idle_waiters.append(idle)
            try:
                await asyncio.wait_for(idle, deadline)
            except TimeoutError:
                drained = False
                log.warning(
                    "workqueue %s: %d reconcile(s) still running after %ss; cancelling",
                    self.name,
                    len(self._processing),
                    deadline,
                )
        for task in self._workers:
            if not task.done():
                task.cancel()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)
        return drained

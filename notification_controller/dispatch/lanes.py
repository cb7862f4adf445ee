"""Per-Provider delivery lanes in this process (the ``memory`` store: Flux's at-most-once).

* one lane per Provider, up to ``concurrency`` workers each; a worker exists only while its lane has work;
* a global cap on pending notifications (``max_pending``): what it refuses is dropped and counted as
  ``overload``, never silently; logged at error at most once per Provider per ``OVERLOAD_LOG_INTERVAL``
  with the number dropped since the previous line, and once more when nothing is pending any more (a flood
  of 20,000 refused events was 20,000 lines);
* ``wait_idle`` waits on an event set when the last pending notification is done (no polling);
* ``shutdown`` stops accepting, lets in-flight deliveries finish within the grace period, then cancels
  and counts what it abandoned (``shutdown``): every notification put here ends delivered, failed or
  dropped.

This is one of the two ``Queue``s (``model.Queue``); with a durable store the outbox (``outbox/``) takes
this module's place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..logsetup import fields
from ..settings import EventSettings
from .model import DropReason, Notification
from .report import Reporter

log = logging.getLogger(__name__)

Send = Callable[[Notification, float], Awaitable[None]]
"""Deliver one notification (``queued_at`` monotonic); must not raise except ``CancelledError``."""


OVERLOAD_LOG_INTERVAL = 10.0
"""Seconds between two overload lines of one Provider (the exact count is ``notification_dropped_total``)."""


@dataclass(frozen=True)
class LaneSettings:
    max_pending: int = EventSettings.max_pending  # defaults and help: settings.py
    concurrency: int = EventSettings.provider_concurrency


class _Lane:
    __slots__ = ("queue", "workers")

    def __init__(self) -> None:
        self.queue: deque[tuple[Notification, float]] = deque()
        self.workers = 0


class MemoryLanes:
    durable = False

    def __init__(self, settings: LaneSettings, report: Reporter, send: Send) -> None:
        self.settings = settings
        self.report = report
        self.send = send
        self._lanes: dict[str, _Lane] = {}
        self._pending = 0
        self._workers: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._accepting = True
        self._interrupted = 0  # in-flight deliveries cancelled by shutdown
        # overload lines, per Provider: (monotonic time of the last line, drops not yet reported);
        # bounded by the number of Providers, like the lanes
        self._overload: dict[str, tuple[float, int]] = {}
        self.overload_log_interval = OVERLOAD_LOG_INTERVAL
        # ``notification_pending`` is read from ``_pending`` when scraped, not set twice per notification
        report.metrics.pending.set_function(self._pending_value)

    def _log_overload(self, notification: Notification) -> None:
        """One error line per Provider per interval, counting the drops since the last one."""
        key = notification.lane
        now = time.monotonic()
        last, unreported = self._overload.get(key, (float("-inf"), 0))
        unreported += 1
        if now - last < self.overload_log_interval:
            self._overload[key] = (last, unreported)
            return
        self._overload[key] = (now, 0)
        log.error(
            "dropped %d notifications for Provider %s (the latest for %s): %d notifications pending "
            "(limit %d); next line for this Provider in %gs at the earliest",
            unreported,
            key,
            notification.event.involved_object.describe(),
            self._pending,
            self.settings.max_pending,
            self.overload_log_interval,
            extra=fields(provider=key, reason=str(DropReason.OVERLOAD), dropped=unreported),
        )

    def _flush_overload(self) -> None:
        """The overload is over (nothing pending): report the drops no line has counted yet, and forget
        every Provider (the map only holds Providers of the current overload)."""
        for key, (_, unreported) in self._overload.items():
            if unreported:
                log.error(
                    "dropped %d more notifications for Provider %s before the overload ended",
                    unreported,
                    key,
                    extra=fields(provider=key, reason=str(DropReason.OVERLOAD), dropped=unreported),
                )
        self._overload.clear()

    def _pending_value(self) -> float:
        return self._pending

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def accepting(self) -> bool:
        return self._accepting

    def enqueue(self, notifications: Sequence[Notification], /) -> None:
        """``Queue.enqueue``: each in its lane now (what is refused is counted)."""
        for notification in notifications:
            self.put(notification)

    def put(self, notification: Notification) -> bool:
        """Queue ``notification`` in its Provider's lane; False (counted) when refused."""
        ptype = notification.provider_type
        if not self._accepting:
            self.report.dropped(DropReason.SHUTDOWN, ptype, notification=notification)
            return False
        if self._pending >= self.settings.max_pending:
            self.report.dropped(
                DropReason.OVERLOAD,
                ptype,
                notification=notification,
                detail=f"{self._pending} notifications pending (--max-pending-notifications)",
            )
            self._log_overload(notification)
            return False
        key = notification.lane
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.queue.append((notification, time.monotonic()))
        self._pending += 1
        if self._pending == 1:
            self._idle.clear()
        self.report.of(ptype).notifications.inc()
        if lane.workers < self.settings.concurrency:
            lane.workers += 1
            task = asyncio.get_running_loop().create_task(self._worker(key, lane))
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)
        return True

    def _set_pending(self, value: int) -> None:
        self._pending = value
        if value:
            self._idle.clear()
        else:
            self._idle.set()

    async def _worker(self, key: str, lane: _Lane) -> None:
        try:
            while lane.queue:
                notification, queued_at = lane.queue.popleft()
                try:
                    await self.send(notification, queued_at)
                except asyncio.CancelledError:
                    if not self._accepting:  # cut off by shutdown after the grace period: count it
                        self._interrupted += 1
                        self.report.dropped(
                            DropReason.SHUTDOWN, notification.provider_type, notification=notification
                        )
                    raise
                finally:
                    self._pending -= 1
                    if not self._pending:
                        self._idle.set()
                        if self._overload:
                            self._flush_overload()
        finally:
            lane.workers -= 1
            if lane.workers == 0 and not lane.queue and self._lanes.get(key) is lane:
                del self._lanes[key]

    async def wait_idle(self, timeout: float | None = None) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Refuse new notifications (counted as ``shutdown``); those pending go on."""
        self._accepting = False

    async def shutdown(self, grace: float) -> int:
        """Stop accepting; wait ``grace`` seconds for what is pending; cancel the rest; return how many
        notifications were abandoned (queued and in flight), each counted once as ``shutdown``."""
        self._accepting = False
        await self.wait_idle(grace)
        queued = 0
        for lane in self._lanes.values():
            while lane.queue:
                notification, _ = lane.queue.popleft()
                self.report.dropped(
                    DropReason.SHUTDOWN, notification.provider_type, notification=notification
                )
                queued += 1
        self._set_pending(self._pending - queued)
        workers = list(self._workers)
        for task in workers:
            task.cancel()
        for task in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        abandoned = queued + self._interrupted
        if abandoned:
            log.warning(
                "shutdown abandoned %d notifications (%d queued, %d in flight)",
                abandoned,
                queued,
                self._interrupted,
            )
        return abandoned

    @property
    def interrupted(self) -> int:
        return self._interrupted

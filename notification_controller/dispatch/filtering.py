"""Heavy message filters run on a worker thread, so the event loop keeps answering (issue 11 item 5).

An Alert's inclusion/exclusion lists are matched against the whole event message, as Flux does. RE2 is
linear, but linear in *message bytes × program size*: a few Alerts with large lists and a 100 KB message
were seconds of CPU, and run on the loop they stalled all four listeners, health included. The dispatcher
estimates that cost (``CompiledAlert.filter_weight`` × message bytes); below ``inline_cost`` (every ordinary
event: a few hundred bytes against a few expressions) the filters run inline, above it they run here:

* on one worker thread (RE2 releases the GIL while it matches: measured, the loop keeps running),
  so heavy filtering uses at most one core and never starves the loop's default executor (DNS);
* with a bounded backlog (``max_backlog`` events and ``max_backlog_bytes`` of messages): an event that
  does not fit is refused, and the dispatcher counts it in ``notification_dropped_total{reason="overload"}``,
  as it does when its own queue is full. The 202 has already been sent (Flux's at-most-once semantics).

The thread exits after ``idle`` seconds without work and is started again on demand. An RE2 search cannot
be interrupted, so ``close`` (dispatcher shutdown) stops the thread after the expression list it is
matching now and cancels the jobs not started: the process's exit waits for one list at most. (A daemon
thread would not be waited for, but the interpreter kills a daemon thread inside RE2 at exit, and pybind11
then aborts the process: ``terminate called without an active exception``.) Every job is awaited by a
task the dispatcher owns; cancelling that task skips a job not started yet.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

INLINE_COST = 1 << 18
"""Filter work (message bytes × RE2 program size) done on the loop: worst case a few milliseconds."""
MAX_BACKLOG = 32
MAX_BACKLOG_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class FilterSettings:
    inline_cost: int = INLINE_COST
    max_backlog: int = MAX_BACKLOG
    max_backlog_bytes: int = MAX_BACKLOG_BYTES
    idle: float = 2.0  # seconds the worker thread waits for work before it exits


_Job = tuple[Sequence[Callable[[], Any]], "concurrent.futures.Future[list[Any]]"]


class _Worker:
    """One thread running jobs in order; it exits when idle or closed and is restarted by ``submit``."""

    def __init__(self, idle: float) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._idle = idle

    def submit(self, fns: Sequence[Callable[[], T]]) -> concurrent.futures.Future[list[T]]:
        future: concurrent.futures.Future[list[T]] = concurrent.futures.Future()
        with self._lock:
            self._jobs.put((fns, future))
            if self._thread is None:
                self._closing.clear()
                self._thread = threading.Thread(target=self._run, name="message-filter")
                self._thread.start()
        return future

    def close(self) -> None:
        """Stop after the function running now; jobs not started are cancelled."""
        with self._lock:
            if self._thread is not None:
                self._closing.set()
                self._jobs.put(None)  # wakes an idle thread

    def _run(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle)
            except queue.Empty:
                job = None
            with self._lock:
                if self._closing.is_set():
                    self._cancel(job)
                    while not self._jobs.empty():
                        self._cancel(self._jobs.get_nowait())
                    self._thread = None
                    return
                if job is None:
                    if self._jobs.empty():  # idle: exit; ``submit`` (same lock) starts a new thread
                        self._thread = None
                        return
                    continue
            self._execute(*job)

    def _execute(
        self, fns: Sequence[Callable[[], Any]], future: concurrent.futures.Future[list[Any]]
    ) -> None:
        if not future.set_running_or_notify_cancel():
            return  # its task was cancelled before the job started
        results: list[Any] = []
        try:
            for fn in fns:
                if self._closing.is_set():
                    future.set_exception(concurrent.futures.CancelledError())
                    return
                results.append(fn())
        except BaseException as exc:  # handed to the awaiting task, which owns the error
            future.set_exception(exc)
        else:
            future.set_result(results)

    @staticmethod
    def _cancel(job: _Job | None) -> None:
        if job is not None:
            job[1].cancel()


class FilterOffload:
    """Decides where message filters run, and runs the heavy ones on the worker thread."""

    def __init__(self, settings: FilterSettings | None = None) -> None:
        self.settings = settings or FilterSettings()
        self._worker = _Worker(self.settings.idle)
        self._backlog = 0
        self._backlog_bytes = 0

    @property
    def backlog(self) -> int:
        return self._backlog

    def inline(self, cost: int) -> bool:
        return cost <= self.settings.inline_cost

    def admit(self, size: int) -> bool:
        """Reserve room for one event whose message is ``size`` bytes; False when the backlog is full.

        An admitted event must be passed to ``run`` (which releases the room when it ends)."""
        s = self.settings
        if self._backlog >= s.max_backlog or (
            self._backlog and self._backlog_bytes + size > s.max_backlog_bytes
        ):
            return False
        self._backlog += 1
        self._backlog_bytes += size
        return True

    async def run(self, fns: Sequence[Callable[[], T]], size: int) -> list[T]:
        """Run ``fns`` in order on the worker thread (after ``admit(size)``); the loop stays free meanwhile.

        Each function should be one bounded piece of work (one Alert's lists): ``close`` stops between them.
        """
        try:
            return await asyncio.wrap_future(self._worker.submit(fns))
        finally:
            self._backlog -= 1
            self._backlog_bytes -= size

    def close(self) -> None:
        """Stop the worker thread (shutdown): after the function it runs now, cancelling the rest."""
        self._worker.close()

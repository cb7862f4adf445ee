"""The controllers' work queue: client-go workqueue semantics (adversarial checklist D11, D12).

Runs under ``looptime``: the event loop's clock is fake, so minutes of backoff take no real time and every
delay can be asserted exactly.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from notification_controller.controllers.queue import LoopBudget, WorkQueue

pytestmark = pytest.mark.looptime

Key = tuple[str, str]


async def until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll (in loop time) until ``predicate`` holds; fail after ``timeout`` loop seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.1)


def start(
    queue: WorkQueue[Key], handler: Callable[[Key], Awaitable[None]], workers: int = 4
) -> asyncio.Task[None]:
    return asyncio.create_task(queue.run(handler, workers=workers))


async def test_adding_a_queued_key_is_a_no_op() -> None:
    queue: WorkQueue[Key] = WorkQueue("t")
    for _ in range(1000):
        queue.add(("ns", "a"))
    queue.add(("ns", "b"))
    assert len(queue) == 2
    seen: list[Key] = []

    async def handler(key: Key) -> None:
        seen.append(key)

    task = start(queue, handler)
    await until(lambda: len(seen) == 2)
    await asyncio.sleep(5)
    assert seen == [("ns", "a"), ("ns", "b")]
    assert await queue.shutdown(1.0)
    await task


async def test_key_added_while_in_flight_is_processed_once_more_and_never_concurrently() -> None:
    """D11: the same key queued 1000 times while in flight → at most one at a time, exactly once more after."""
    queue: WorkQueue[Key] = WorkQueue("t")
    key = ("ns", "hot")
    release = asyncio.Event()
    running = 0
    max_running = 0
    calls = 0

    async def handler(k: Key) -> None:
        nonlocal running, max_running, calls
        calls += 1
        running += 1
        max_running = max(max_running, running)
        if calls == 1:
            await release.wait()
        running -= 1

    task = start(queue, handler, workers=8)
    queue.add(key)
    await until(lambda: calls == 1)
    for _ in range(1000):
        queue.add(key)
    assert queue.in_flight == frozenset({key})
    assert len(queue) == 0  # not handed to another worker while in flight
    await asyncio.sleep(3)
    assert calls == 1
    release.set()
    await until(lambda: calls == 2)
    await asyncio.sleep(10)
    assert calls == 2
    assert max_running == 1
    await queue.shutdown(1.0)
    await task


async def test_workers_process_distinct_keys_concurrently() -> None:
    queue: WorkQueue[Key] = WorkQueue("t")
    running = 0
    max_running = 0

    async def handler(k: Key) -> None:
        nonlocal running, max_running
        running += 1
        max_running = max(max_running, running)
        await asyncio.sleep(1)
        running -= 1

    task = start(queue, handler, workers=4)
    for i in range(10):
        queue.add(("ns", f"k{i}"))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await until(lambda: len(queue) == 0 and not queue.in_flight)
    assert max_running == 4
    assert loop.time() - t0 == pytest.approx(3, abs=0.1)  # 10 keys, 4 at a time, 1s each
    await queue.shutdown(1.0)
    await task


async def test_add_after_delays_and_earliest_deadline_wins() -> None:
    queue: WorkQueue[Key] = WorkQueue("t")
    loop = asyncio.get_running_loop()
    times: dict[Key, list[float]] = {}

    async def handler(k: Key) -> None:
        times.setdefault(k, []).append(loop.time())

    task = start(queue, handler)
    t0 = loop.time()
    queue.add_after(("ns", "a"), 30)
    queue.add_after(("ns", "a"), 60)  # later: ignored, the 30s deadline stays
    queue.add_after(("ns", "b"), 60)
    queue.add_after(("ns", "b"), 10)  # earlier: replaces the 60s one
    assert queue.delayed == frozenset({("ns", "a"), ("ns", "b")})
    await asyncio.sleep(9)
    assert times == {}
    await until(lambda: len(times.get(("ns", "a"), [])) == 1)
    await asyncio.sleep(100)
    assert [t - t0 for t in times[("ns", "b")]] == [pytest.approx(10, abs=0.01)]
    assert [t - t0 for t in times[("ns", "a")]] == [pytest.approx(30, abs=0.01)]
    queue.add_after(("ns", "c"), 0)  # no delay = immediate add
    await until(lambda: ("ns", "c") in times)
    await queue.shutdown(1.0)
    await task


async def test_backoff_grows_to_the_cap_and_does_not_starve_other_keys() -> None:
    """D12: a key failing forever backs off 750ms → 15m (doubling); other keys keep flowing at full rate."""
    queue: WorkQueue[Key] = WorkQueue("t", min_retry_delay=0.75, max_retry_delay=900)
    loop = asyncio.get_running_loop()
    bad, good = ("ns", "bad"), ("ns", "good")
    bad_times: list[float] = []
    good_calls = 0
    fifteen_failures = asyncio.Event()

    async def handler(k: Key) -> None:
        nonlocal good_calls
        if k == bad:
            bad_times.append(loop.time())
            if len(bad_times) == 15:
                fifteen_failures.set()
            queue.add_rate_limited(k)
        else:
            good_calls += 1
            queue.forget(k)
            queue.add_after(k, 1.0)

    task = start(queue, handler, workers=1)  # one worker: the failing key must not hold it
    t0 = loop.time()
    queue.add(bad)
    queue.add(good)
    await asyncio.wait_for(fifteen_failures.wait(), timeout=7200)
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(bad_times)]
    assert gaps == [0.75, 1.5, 3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 192.0, 384.0, 768.0, 900.0, 900.0, 900.0]
    elapsed = loop.time() - t0
    assert good_calls == pytest.approx(elapsed, rel=0.02)  # ~one per second all along
    assert queue.failures(bad) == 15
    queue.forget(bad)
    assert queue.next_backoff(bad) == 0.75
    await queue.shutdown(1.0)
    await task


async def test_handler_exception_is_retried_with_backoff_and_worker_survives() -> None:
    queue: WorkQueue[Key] = WorkQueue("t", min_retry_delay=2, max_retry_delay=10)
    loop = asyncio.get_running_loop()
    calls: list[float] = []

    async def handler(k: Key) -> None:
        calls.append(loop.time())
        if len(calls) < 3:
            raise RuntimeError("boom")

    task = start(queue, handler, workers=1)
    t0 = loop.time()
    queue.add(("ns", "x"))
    await until(lambda: len(calls) == 3)
    assert [round(c - t0, 3) for c in calls] == [0, 2, 6]
    queue.add(("ns", "y"))
    await until(lambda: len(calls) == 4)
    await queue.shutdown(1.0)
    await task


async def test_shutdown_lets_in_flight_work_finish_and_drops_the_rest() -> None:
    queue: WorkQueue[Key] = WorkQueue("t")
    finished: list[Key] = []
    started = asyncio.Event()

    async def handler(k: Key) -> None:
        started.set()
        await asyncio.sleep(2)
        finished.append(k)

    task = start(queue, handler, workers=1)
    queue.add(("ns", "a"))
    queue.add(("ns", "b"))
    queue.add_after(("ns", "c"), 1)
    await started.wait()
    assert await queue.shutdown(deadline=5)
    await task
    assert finished == [("ns", "a")]
    queue.add(("ns", "d"))  # refused after shutdown
    assert len(queue) == 0
    assert queue.delayed == frozenset()


async def test_shutdown_cancels_work_stuck_past_the_deadline() -> None:
    queue: WorkQueue[Key] = WorkQueue("t")
    loop = asyncio.get_running_loop()
    cancelled = asyncio.Event()
    started = asyncio.Event()

    async def handler(k: Key) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = start(queue, handler, workers=2)
    queue.add(("ns", "stuck"))
    await started.wait()
    t0 = loop.time()
    assert not await queue.shutdown(deadline=5)
    assert loop.time() - t0 == pytest.approx(5, abs=0.01)
    assert cancelled.is_set()
    await task
    assert task.done()


async def test_cancelling_run_cancels_the_workers() -> None:
    queue: WorkQueue[Key] = WorkQueue("t")
    cancelled = asyncio.Event()

    async def handler(k: Key) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = start(queue, handler, workers=1)
    queue.add(("ns", "a"))
    await until(lambda: bool(queue.in_flight))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="retry delays"):
        WorkQueue("t", min_retry_delay=0)
    with pytest.raises(ValueError, match="retry delays"):
        WorkQueue("t", min_retry_delay=10, max_retry_delay=1)


@pytest.mark.parametrize("shared", [True, False])
async def test_the_workers_of_queues_sharing_a_budget_yield_together(shared: bool) -> None:
    """Issue 17: reconciles that never wait (local mode) take at most one budget per turn of the loop, all
    workers of all queues together, so the sockets (``/readyz``) are polled between. A spent budget of 0 s
    lets exactly one reconcile run per turn; a budget per queue would let each queue run one."""
    loop = asyncio.get_running_loop()
    turn = 0

    def tick() -> None:  # runs once per turn of the loop (so the loop is never idle: no sleeping here)
        nonlocal turn
        turn += 1
        if turn < 1000:
            loop.call_soon(tick)

    loop.call_soon(tick)
    shared_budget = LoopBudget(0.0)
    queues: list[WorkQueue[Key]] = [
        WorkQueue(name, budget=shared_budget if shared else LoopBudget(0.0)) for name in ("a", "b")
    ]
    turns: list[int] = []

    async def handler(key: Key) -> None:
        turns.append(turn)  # never waits, as a reconcile against the in-memory cluster

    for queue in queues:
        for i in range(20):
            queue.add((queue.name, str(i)))
    tasks = [start(queue, handler, workers=3) for queue in queues]
    while len(turns) < 40 and turn < 1000:
        await asyncio.sleep(0)
    assert len(turns) == 40
    most_in_one_turn = max(turns.count(t) for t in set(turns))
    assert most_in_one_turn == (1 if shared else 2)
    for queue, task in zip(queues, tasks, strict=True):
        assert await queue.shutdown(1.0)
        await task

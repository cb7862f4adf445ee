"""The outbox runner (dispatch/outbox/runner.py) on real stores: retries, breaker, dead letters, lease expiry.

Policies are pure and tested with a manual clock; the runner runs against the real ``memory`` and
``sqlite`` stores (a real file in a temp dir) with short delays.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from notification_controller.dispatch.model import DELIVERED, DeliveryOutcome, Result
from notification_controller.dispatch.outbox import (
    BreakerState,
    CircuitBreaker,
    DurableSettings,
    OutboxRunner,
    RedeliveryPolicy,
)
from notification_controller.lib.clock import ManualClock
from notification_controller.store import NewItem, Store, open_store
from notification_controller.store.base import Lease

FAST = DurableSettings(
    max_age=30.0,
    concurrency=4,
    poll_interval=0.02,
    retry=RedeliveryPolicy(base=0.01, cap=0.05),
    breaker_threshold=1000,
)


def test_retry_delay_doubles_with_jitter_and_honours_retry_after() -> None:
    policy = RedeliveryPolicy(base=1.0, cap=60.0)
    rng = random.Random(7)
    for attempts, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (7, 60.0), (500, 60.0)):
        delays = [policy.delay(attempts, rng=rng) for _ in range(200)]
        assert min(delays) >= ceiling / 2
        assert max(delays) <= ceiling
        assert max(delays) - min(delays) > ceiling / 10  # jitter: lanes do not retry in lockstep
    assert policy.delay(1, retry_after=120.0, rng=rng) == 120.0
    assert policy.delay(1, retry_after=10**9, rng=rng) == policy.retry_after_cap


def test_breaker_opens_after_threshold_probes_once_and_doubles_cooldown() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(clock, threshold=3, cooldown=10.0, max_cooldown=25.0)
    assert [breaker.failure() for _ in range(3)] == [False, False, True]
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
    clock.advance(10.0)
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # only one
    assert breaker.failure()  # failed probe: open again, twice as long
    clock.advance(19.0)
    assert not breaker.allow()
    clock.advance(1.0)
    assert breaker.allow()
    breaker.failure()
    assert breaker.reopens_in == 25.0  # capped
    clock.advance(25.0)
    assert breaker.allow()
    breaker.success()
    assert breaker.allow() and breaker.allow()  # closed: every worker may lease
    assert breaker.failures == 0


def test_breaker_release_frees_the_probe_slot() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(clock, threshold=1, cooldown=1.0)
    breaker.failure()
    clock.advance(1.0)
    assert breaker.allow()
    breaker.release()  # the probe found the lane empty
    assert breaker.allow()


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    url = "memory" if request.param == "memory" else f"sqlite:{tmp_path / 'outbox.db'}"
    s = open_store(url, ack_wait=0.3)
    await s.start()
    yield s
    await s.close()


async def _drain(runner: OutboxRunner, store: Store, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while await store.stats():
        assert asyncio.get_running_loop().time() < deadline, await store.stats()
        await asyncio.sleep(0.01)


def _items(n: int, lanes: int = 2) -> list[NewItem]:
    return [NewItem(f"n{i}", f"ns/p{i % lanes}", f"payload {i}".encode()) for i in range(n)]


async def test_flaky_provider_every_item_delivered_after_retries(store: Store) -> None:
    tries: Counter[str] = Counter()
    delivered: list[str] = []

    async def deliver(lease: Lease) -> Result:
        tries[lease.id] += 1
        assert lease.attempts == tries[lease.id]  # the store counts attempts across NAKs
        if tries[lease.id] < 3:
            return Result(DeliveryOutcome.RETRY, "503 Service Unavailable")
        delivered.append(lease.id)
        return DELIVERED

    await store.append(_items(40))
    runner = OutboxRunner(store, deliver, FAST)
    runner.start()
    await _drain(runner, store)
    await runner.stop()
    assert sorted(delivered) == sorted(f"n{i}" for i in range(40))
    assert set(tries.values()) == {3}
    assert runner.attempts == 120
    assert await store.dead_letters() == []


async def test_permanent_failure_and_max_age_become_dead_letters(store: Store) -> None:
    dead: list[tuple[str, str, str]] = []

    async def deliver(lease: Lease) -> Result:
        if lease.id == "n0":
            return Result(DeliveryOutcome.PERMANENT, "400 Bad Request: invalid channel")
        return Result(DeliveryOutcome.RETRY, "connection refused")

    await store.append(_items(2, lanes=1))
    settings = DurableSettings(
        max_age=0.3,
        concurrency=2,
        poll_interval=0.02,
        retry=RedeliveryPolicy(base=0.05, cap=0.1),
        breaker_threshold=1000,
    )
    runner = OutboxRunner(
        store, deliver, settings, on_dead_letter=lambda lease, r, e: dead.append((lease.id, r, e))
    )
    runner.start()
    await _drain(runner, store)
    await runner.stop()
    assert [(i, r) for i, r, _ in sorted(dead)] == [("n0", "permanent"), ("n1", "max-age")]
    assert "connection refused" in sorted(dead)[1][2]  # the last error, whichever path dead-lettered it
    assert sorted(dead)[0] == ("n0", "permanent", "400 Bad Request: invalid channel")
    letters = {d.id: d for d in await store.dead_letters()}
    assert letters["n0"].reason == "permanent" and letters["n0"].attempts == 1
    assert letters["n1"].reason == "max-age" and letters["n1"].attempts >= 2


async def test_breaker_pauses_a_failing_lane_and_a_probe_resumes_it(store: Store) -> None:
    healthy = asyncio.Event()
    calls: list[float] = []
    changes: list[tuple[str, BreakerState]] = []
    loop = asyncio.get_running_loop()

    async def deliver(lease: Lease) -> Result:
        calls.append(loop.time())
        return DELIVERED if healthy.is_set() else Result(DeliveryOutcome.RETRY, "502 Bad Gateway")

    await store.append(_items(20, lanes=1))
    settings = DurableSettings(
        max_age=60,
        concurrency=4,
        poll_interval=0.02,
        retry=RedeliveryPolicy(base=0.01, cap=0.02),
        breaker_threshold=5,
        breaker_cooldown=0.4,
    )
    runner = OutboxRunner(store, deliver, settings, on_breaker=lambda k, s: changes.append((k, s)))
    runner.start()
    while not changes:
        await asyncio.sleep(0.01)
    assert changes[0] == ("ns/p0", BreakerState.OPEN)
    opened, before = loop.time(), len(calls)
    await asyncio.sleep(0.3)  # inside the cool-down: no attempt at all (in-flight ones aside)
    assert len(calls) - before <= settings.concurrency
    healthy.set()
    await _drain(runner, store)
    await runner.stop()
    assert changes[-1] == ("ns/p0", BreakerState.CLOSED)
    assert min(t for t in calls[before + settings.concurrency :]) >= opened + 0.35


async def test_lease_of_a_stopped_runner_runs_out_and_another_delivers(store: Store) -> None:
    """A worker dies mid-delivery (its runner is cancelled): the item is delivered by the next runner."""
    started = asyncio.Event()

    async def hang(lease: Lease) -> Result:
        started.set()
        await asyncio.sleep(3600)
        return DELIVERED

    await store.append(_items(1, lanes=1))
    first = OutboxRunner(store, hang, FAST)
    first.start()
    await started.wait()
    await first.stop(grace=0.0)
    got: list[Lease] = []

    async def ok(lease: Lease) -> Result:
        got.append(lease)
        return DELIVERED

    second = OutboxRunner(store, ok, FAST)
    second.start()
    await _drain(second, store)
    await second.stop()
    assert [(g.id, g.attempts) for g in got] == [("n0", 2)]


async def test_wake_starts_a_lane_before_the_poll(store: Store) -> None:
    got = asyncio.Event()

    async def deliver(lease: Lease) -> Result:
        got.set()
        return DELIVERED

    runner = OutboxRunner(store, deliver, DurableSettings(poll_interval=3600))
    runner.start()
    await asyncio.sleep(0.05)  # the first poll found nothing
    await store.append(_items(1, lanes=1))
    runner.wake("ns/p0")
    await asyncio.wait_for(got.wait(), 2.0)
    await runner.stop()


async def test_a_raising_deliver_is_retried_not_lost(store: Store) -> None:
    calls = 0

    async def deliver(lease: Lease) -> Result:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("bug")
        return DELIVERED

    await store.append(_items(1, lanes=1))
    runner = OutboxRunner(store, deliver, FAST)
    runner.start()
    await _drain(runner, store)
    await runner.stop()
    assert calls == 2

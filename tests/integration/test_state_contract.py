"""One contract, three backends: the memory, SQLite and NATS JetStream stores answer alike.

The dispatcher will be written against ``store.base.Store`` only, so every backend must keep the same
semantics: leases, delayed retries, dead letters, the duplicate window and the KV's compare-and-set.
Memory and SQLite run on a ``ManualClock`` (time moves when told); NATS keeps time on the server, so its
``advance`` really sleeps — the durations are kept around one second.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from notification_controller.lib.clock import ManualClock
from notification_controller.store import NewItem, Store
from notification_controller.store.memory import MemoryStore
from notification_controller.store.nats import NATSStore
from notification_controller.store.sqlite import SQLiteStore
from tests.support.nats_server import run_nats_server

ACK_WAIT = 1.0


@dataclass
class Backend:
    store: Store
    advance: Callable[[float], Awaitable[None]]


def _manual(clock: ManualClock) -> Callable[[float], Awaitable[None]]:
    async def advance(seconds: float) -> None:
        clock.advance(seconds)

    return advance


@pytest.fixture(params=["memory", "sqlite", "nats"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    clock = ManualClock()
    if request.param == "nats":
        async with run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as srv:
            store: Store = NATSStore([srv.url], ack_wait=ACK_WAIT)
            await store.start()
            try:
                yield Backend(store, asyncio.sleep)
            finally:
                await store.close()
        return
    if request.param == "memory":
        store = MemoryStore(clock=clock, ack_wait=ACK_WAIT)
    else:
        store = SQLiteStore(tmp_path / "state.db", clock=clock, ack_wait=ACK_WAIT)
    await store.start()
    try:
        yield Backend(store, _manual(clock))
    finally:
        await store.close()


def item(n: int, provider: str = "default/slack") -> NewItem:
    return NewItem(f"id-{n}", provider, f"payload-{n}".encode())


async def test_lease_ack_removes_the_item(backend: Backend) -> None:
    store = backend.store
    await store.append([item(1)])
    lease = await store.lease("default/slack")
    assert lease is not None
    assert (lease.id, lease.provider, lease.payload, lease.attempts) == (
        "id-1",
        "default/slack",
        b"payload-1",
        1,
    )
    assert await store.lease("default/slack") is None, "a leased item is held by one worker"
    assert (await store.stats())["default/slack"].depth == 1, "a leased item still counts until acked"
    await store.ack(lease)
    assert await store.lease("default/slack") is None
    assert await store.stats() == {}


async def test_append_is_idempotent_per_id(backend: Backend) -> None:
    await backend.store.append([item(1), item(1)])
    await backend.store.append([item(1)])
    assert (await backend.store.stats())["default/slack"].depth == 1


async def test_lanes_are_separate_and_fifo(backend: Backend) -> None:
    store = backend.store
    await store.append([item(1, "ns/a"), item(2, "ns/b.with.dots"), item(3, "ns/a")])
    first = await store.lease("ns/a")
    second = await store.lease("ns/a")
    other = await store.lease("ns/b.with.dots")
    assert first is not None and second is not None and other is not None
    assert (first.id, second.id, other.id) == ("id-1", "id-3", "id-2")
    stats = await store.stats()
    assert {k: v.depth for k, v in stats.items()} == {"ns/a": 2, "ns/b.with.dots": 1}


async def test_nack_delays_the_next_attempt(backend: Backend) -> None:
    store = backend.store
    await store.append([item(1)])
    lease = await store.lease("default/slack")
    assert lease is not None
    await store.nack(lease, delay=1.0)
    assert await store.lease("default/slack") is None, "not due before the delay"
    await backend.advance(1.5)
    again = await store.lease("default/slack")
    assert again is not None and again.id == "id-1" and again.attempts == 2


async def test_an_expired_lease_is_leased_again(backend: Backend) -> None:
    store = backend.store
    await store.append([item(1)])
    lost = await store.lease("default/slack")  # the worker holding it dies: no ack, no nack
    assert lost is not None
    await backend.advance(ACK_WAIT + 0.8)
    again = await store.lease("default/slack")
    assert again is not None and again.id == "id-1" and again.attempts == 2
    await store.ack(again)
    assert await store.stats() == {}


async def test_dead_letter_list_replay_drop(backend: Backend) -> None:
    store = backend.store
    await store.append([item(1), item(2)])
    for _ in range(2):
        lease = await store.lease("default/slack")
        assert lease is not None
        await store.dead_letter(lease, reason="max-age", error=f"HTTP 503 for {lease.id} (token *****)")
    assert await store.stats() == {}
    dead = await store.dead_letters()
    assert [(d.id, d.reason, d.attempts, d.payload) for d in dead] == [
        ("id-1", "max-age", 1, b"payload-1"),
        ("id-2", "max-age", 1, b"payload-2"),
    ]
    assert dead[0].error == "HTTP 503 for id-1 (token *****)"
    assert await store.dead_letters(provider="other/provider") == []
    assert await store.replay(["id-1", "unknown"]) == 1
    replayed = await store.lease("default/slack")
    assert replayed is not None and (replayed.id, replayed.payload, replayed.attempts) == (
        "id-1",
        b"payload-1",
        1,
    )
    assert await store.drop(["id-2"]) == 1
    assert await store.dead_letters() == []


async def test_stats_report_the_oldest_age(backend: Backend) -> None:
    await backend.store.append([item(1)])
    await backend.advance(1.0)
    await backend.store.append([item(2)])
    stats = (await backend.store.stats())["default/slack"]
    assert stats.depth == 2 and 0.9 <= stats.oldest_age < 30


async def test_duplicate_window_first_caller_wins_until_the_ttl(backend: Backend) -> None:
    store = backend.store
    assert await store.seen("event-key", 1.0) is False
    assert await store.seen("event-key", 1.0) is True
    assert await store.seen("other-key", 1.0) is False
    await backend.advance(2.0)
    assert await store.seen("event-key", 1.0) is False, "the window is over: a new first"
    assert await store.seen("event-key", 1.0) is True


async def test_forget_reopens_the_duplicate_window_for_that_key_only(backend: Backend) -> None:
    store = backend.store
    assert await store.seen("event-key", 60.0) is False
    assert await store.seen("kept-key", 60.0) is False
    await store.forget("event-key", 60.0)  # the append after it failed: the emitter's retry is no duplicate
    assert await store.seen("event-key", 60.0) is False
    assert await store.seen("event-key", 60.0) is True
    assert await store.seen("kept-key", 60.0) is True
    await store.forget("never-seen", 60.0)  # nothing to forget: no error


async def test_kv_compare_and_set_and_ttl(backend: Backend) -> None:
    store = backend.store
    assert await store.kv_get("receiver/replay/abc") is None
    rev = await store.kv_cas("receiver/replay/abc", b"one", expected=None)
    assert rev is not None
    assert await store.kv_cas("receiver/replay/abc", b"two", expected=None) is None, "exists: create loses"
    assert await store.kv_cas("receiver/replay/abc", b"two", expected=rev + 100) is None
    rev2 = await store.kv_cas("receiver/replay/abc", b"two", expected=rev)
    assert rev2 is not None and rev2 != rev
    entry = await store.kv_get("receiver/replay/abc")
    assert entry is not None and (entry.value, entry.revision) == (b"two", rev2)
    assert await store.kv_cas("receiver/replay/abc", b"three", expected=rev) is None, "stale revision"

    await store.kv_put("short", b"lived", ttl=1.0)
    assert (await store.kv_get("short")) is not None
    await backend.advance(1.5)
    assert await store.kv_get("short") is None
    assert await store.kv_cas("short", b"again", expected=None) is not None, "an expired key is absent"

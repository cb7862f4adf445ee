"""The ``memory`` store's own rules, and ``open_store``'s URL parsing (pure, no I/O).

The shared semantics are in ``tests/integration/test_state_contract.py``; here is what only memory does
(state per process, per object) and what a stale lease may not do.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from notification_controller.errors import ConfigError
from notification_controller.lib.clock import ManualClock
from notification_controller.store import NewItem, open_store
from notification_controller.store.memory import MemoryStore
from notification_controller.store.nats import NATSStore
from notification_controller.store.sqlite import SQLiteStore


async def test_state_is_per_store_object() -> None:
    first, second = MemoryStore(), MemoryStore()
    await first.append([NewItem("id-1", "ns/p", b"x")])
    assert await second.lease("ns/p") is None, "two apps in one process share nothing"
    assert await second.seen("k", 60) is False and await first.seen("k", 60) is False
    assert first.durable is False


async def test_a_stale_lease_cannot_ack_the_new_holder() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock, ack_wait=10)
    await store.append([NewItem("id-1", "ns/p", b"x")])
    stale = await store.lease("ns/p")
    assert stale is not None
    clock.advance(11)
    current = await store.lease("ns/p")
    assert current is not None and current.attempts == 2
    await store.ack(stale)
    await store.nack(stale, delay=100)
    await store.dead_letter(stale, reason="max-age", error="late")
    assert (await store.stats())["ns/p"].depth == 1 and await store.dead_letters() == []
    await store.ack(current)
    assert await store.stats() == {}


async def test_the_duplicate_window_stays_bounded() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    for n in range(5000):
        assert await store.seen(f"k{n}", 1.0) is False
    clock.advance(2)
    for n in range(5000):
        assert await store.seen(f"new{n}", 1.0) is False
    assert len(store._seen) <= 5000 + 4096


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory"), MemoryStore)
    sqlite = open_store(f"sqlite:{tmp_path}/s.db?synchronous=normal")
    assert isinstance(sqlite, SQLiteStore) and sqlite.synchronous == "normal"
    assert sqlite.path == tmp_path / "s.db"
    absolute = open_store(f"sqlite://{tmp_path}/a.db")
    assert isinstance(absolute, SQLiteStore) and absolute.synchronous == "full"
    assert absolute.path == tmp_path / "a.db"
    nats = open_store("nats://nats-0.nats:4222,nats-1.nats:4222?replicas=3&prefix=flux")
    assert isinstance(nats, NATSStore)
    assert nats.servers == ["nats://nats-0.nats:4222", "nats://nats-1.nats:4222"]
    assert (nats.replicas, nats.outbox_stream, nats.state_bucket) == (3, "FLUX_OUTBOX", "flux_state")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://x:1", "unknown scheme"),
        ("", "unknown scheme"),
        ("sqlite:", "no file path"),
        ("sqlite:/x.db?synchronous=off", "synchronous must be one of"),
        ("sqlite:/x.db?journal=delete", "unknown option 'journal'"),
        ("nats://host", "'host' is not HOST:PORT"),
        ("nats://a:1,b:99999", "'b:99999' is not HOST:PORT"),
        ("nats://a:1?replicas=9", "replicas must be 1 to 5"),
        ("nats://a:1?prefix=a.b", "prefix must be"),
    ],
)
def test_bad_urls_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match="invalid --store") as info:
        open_store(url)
    assert message in str(info.value)


def test_credentials_in_a_nats_url_are_refused_and_not_echoed() -> None:
    with pytest.raises(ConfigError) as info:
        open_store("nats://flux:s3cret-pass@nats:4222")
    assert "s3cret-pass" not in str(info.value)
    assert "credentials do not belong in the URL" in str(info.value)


# ---- expired keys are deleted (issue 23 item 5) --------------------------------------------------------------
async def test_expired_kv_keys_are_deleted_not_just_hidden() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    for n in range(1000):
        await store.kv_put(f"short{n}", b"v", ttl=10)
    await store.kv_put("forever", b"v")
    await store.kv_put("made-permanent", b"v", ttl=5)
    await store.kv_put("made-permanent", b"w")  # a write without ttl takes the TTL away
    assert await store.seen("window", 10) is False
    assert store.keys() == 1003
    clock.advance(11)
    assert await store.kv_get("forever") is not None  # any operation sweeps what expired
    assert store.keys() == 2
    assert await store.kv_get("made-permanent") is not None and await store.kv_get("short1") is None
    await store.close()


async def test_a_sweep_costs_what_expired_not_what_is_stored() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    for n in range(200_000):
        await store.kv_put(f"long{n}", b"v", ttl=3600)
    for n in range(1000):
        await store.kv_put(f"short{n}", b"v", ttl=10)
    heap = store._kv_expiry._heap
    before = len(heap)
    clock.advance(11)
    assert store.sweep() == 1000
    assert before - len(heap) == 1000, "only the expired entries were visited"
    await store.close()


async def test_rewriting_one_key_keeps_the_expiry_heap_bounded() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    for n in range(50_000):  # a threshold key is rewritten with every event, each time with a new TTL
        await store.kv_put("hot", str(n).encode(), ttl=600)
        clock.advance(0.001)
    assert len(store._kv_expiry._heap) <= 2 * 1 + 1024 + 1
    assert (await store.kv_get("hot")) is not None
    await store.close()


async def test_a_timer_sweeps_when_nothing_calls() -> None:
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    await store.kv_put("k", b"v", ttl=0.1)
    assert await store.seen("w", 0.1) is False
    clock.advance(1)
    async with asyncio.timeout(10):  # the timer fires one (loop) second after the earliest deadline
        while store.keys():
            await asyncio.sleep(0.05)
    await store.close()
    assert store._timer is None

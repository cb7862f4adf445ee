"""The ``nats://`` store against a real ``nats-server -js``: what several replicas need from it.

Two ``NATSStore`` clients stand for two controller replicas sharing one JetStream: each outbox item is
leased by exactly one of them; the duplicate window has one first-winner across them; a lease a replica
never acknowledges (it was killed) is redelivered to the other after the ack wait; the outbox survives a
restart of nats-server on the same store directory; an unreachable server is a ``StoreError``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from notification_controller.errors import StoreError
from notification_controller.lib.natsconn import NATSAuth
from notification_controller.store import NewItem, open_store
from notification_controller.store.base import Lease, Retention
from notification_controller.store.nats import NATSStore
from tests.support.nats_server import run_nats_server


@asynccontextmanager
async def client(url: str, ack_wait: float = 30.0, **kwargs: object) -> AsyncIterator[NATSStore]:
    store = NATSStore([url], ack_wait=ack_wait, **kwargs)  # type: ignore[arg-type]
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def _drain(store: NATSStore, provider: str) -> list[Lease]:
    got: list[Lease] = []
    while (lease := await store.lease(provider)) is not None:
        got.append(lease)
    return got


async def test_two_replicas_share_one_outbox_each_item_leased_once(tmp_path: Path) -> None:
    async with (
        run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as srv,
        client(srv.url) as a,
        client(srv.url) as b,
    ):
        await a.append([NewItem(f"id-{n}", "ns/p", str(n).encode()) for n in range(0, 100, 2)])
        await b.append([NewItem(f"id-{n}", "ns/p", str(n).encode()) for n in range(1, 100, 2)])

        async def worker(store: NATSStore) -> list[str]:
            ids: list[str] = []
            while (lease := await store.lease("ns/p")) is not None:
                ids.append(lease.id)
                await store.ack(lease)
            return ids

        got_a, got_b = await asyncio.gather(worker(a), worker(b))
        assert sorted(got_a + got_b) == sorted(f"id-{n}" for n in range(100)), "each item exactly once"
        assert got_a and got_b, "both replicas took part"
        assert await a.stats() == {} and await b.stats() == {}


async def test_duplicate_window_first_wins_across_replicas(tmp_path: Path) -> None:
    async with (
        run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as srv,
        client(srv.url) as a,
        client(srv.url) as b,
    ):
        keys = [f"event-{n}" for n in range(20)]
        answers = await asyncio.gather(*(s.seen(k, 60) for k in keys for s in (a, b)))
        pairs = list(zip(answers[0::2], answers[1::2], strict=True))
        assert all(sorted(p) == [False, True] for p in pairs), pairs  # one first, one duplicate per key
        assert await a.seen("event-0", 60) is True and await b.seen("event-0", 60) is True


async def test_replicas_creating_the_same_windows_at_once_share_them(tmp_path: Path) -> None:
    """Two replicas whose first ``seen`` for a window comes at the same moment both create its bucket; the
    one JetStream refuses ("subjects overlap with an existing stream") uses the other's (it raised
    StoreError, a 503 for the event, now and then on CI)."""
    async with (
        run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as srv,
        client(srv.url) as a,
        client(srv.url) as b,
    ):
        for ttl in range(1, 31):  # 30 windows, each created by both replicas at once
            answers = await asyncio.gather(a.seen(f"k{ttl}", ttl), b.seen(f"k{ttl}", ttl))
            assert sorted(answers) == [False, True], (ttl, answers)


async def test_an_unacked_lease_is_redelivered_to_the_other_replica(tmp_path: Path) -> None:
    async with (
        run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as srv,
        client(srv.url, ack_wait=1.0) as a,
        client(srv.url, ack_wait=1.0) as b,
    ):
        await a.append([NewItem("only", "ns/p", b"payload")])
        held = await a.lease("ns/p")
        assert held is not None and held.attempts == 1
        await a.close()  # replica a dies mid-delivery: no ack, no nak
        assert await b.lease("ns/p") is None, "held by a until the ack wait runs out"
        await asyncio.sleep(1.3)
        again = await b.lease("ns/p")
        assert again is not None and (again.id, again.payload, again.attempts) == ("only", b"payload", 2)
        await b.ack(again)
        assert await b.stats() == {}


async def test_the_outbox_and_state_survive_a_nats_server_restart(tmp_path: Path) -> None:
    store_dir = str(tmp_path / "js")
    async with run_nats_server(jetstream=True, store_dir=store_dir) as srv, client(srv.url) as a:
        port = srv.port
        await a.append([NewItem(f"id-{n}", "ns/p", b"x") for n in range(10)])
        first = await a.lease("ns/p")
        assert first is not None
        await a.ack(first)
        await a.kv_put("replay/abc", b"seen")
        assert await a.seen("event", 600) is False
    async with run_nats_server(jetstream=True, store_dir=store_dir, port=port) as srv, client(srv.url) as b:
        assert (await b.stats())["ns/p"].depth == 9
        assert sorted(lease.id for lease in await _drain(b, "ns/p")) == sorted(
            f"id-{n}" for n in range(1, 10)
        )
        entry = await b.kv_get("replay/abc")
        assert entry is not None and entry.value == b"seen"
        assert await b.seen("event", 600) is True, "the duplicate window is persisted too"


async def test_the_client_rides_out_a_restart_without_reopening(tmp_path: Path) -> None:
    store_dir = str(tmp_path / "js")
    async with run_nats_server(jetstream=True, store_dir=store_dir) as srv:
        port = srv.port
        store = NATSStore([srv.url], ack_wait=30)
        await store.start()
    try:
        with pytest.raises(StoreError):  # server down: an error the event server turns into 503
            async with asyncio.timeout(10):
                await store.append([NewItem("lost?", "ns/p", b"x")])
        async with run_nats_server(jetstream=True, store_dir=store_dir, port=port):
            async with asyncio.timeout(20):
                while True:  # reconnects by itself
                    try:
                        await store.ping()
                        break
                    except StoreError:
                        await asyncio.sleep(0.2)
            await store.append([NewItem("after", "ns/p", b"x")])
            lease = await store.lease("ns/p")
            assert lease is not None and lease.id == "after"
    finally:
        await store.close()


async def test_unreachable_server_and_credentials(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    store = open_store(f"nats://127.0.0.1:{free}")
    with pytest.raises(StoreError, match="cannot connect"):
        await store.start()
    config = "authorization { user: flux, password: nats-pass-1 }\n"
    async with run_nats_server(config, jetstream=True, store_dir=str(tmp_path / "js")) as srv:
        wrong = open_store(srv.url, nats_auth=NATSAuth(user="flux", password="wrong-pass"))
        with pytest.raises(StoreError) as info:
            await wrong.start()
        assert "wrong-pass" not in str(info.value)
        async with client(srv.url, auth=NATSAuth(user="flux", password="nats-pass-1")) as ok:
            await ok.ping()
            assert "nats-pass-1" not in repr(ok.auth)


async def _dead_limits(url: str) -> tuple[float | None, int | None]:
    import nats

    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info("NC_DEAD")
        return info.config.max_age, info.config.max_bytes
    finally:
        await nc.close()


async def test_dead_letter_limits_come_from_the_retention_flags_and_follow_a_change(tmp_path: Path) -> None:
    """``--store-dead-letter-max-age`` / ``-max-bytes`` reach ``NC_DEAD`` (as they reach SQLite's sweep); a
    changed value updates the existing stream at the next start; the ``dead-letters`` command (no retention)
    leaves the stream's limits alone."""
    async with run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as srv:
        async with client(srv.url, retention=Retention(3600.0, 1_000_000)):
            assert await _dead_limits(srv.url) == (3600.0, 1_000_000)
        async with client(srv.url, retention=Retention(7200.0, 2_000_000)):
            assert await _dead_limits(srv.url) == (7200.0, 2_000_000)
        async with client(srv.url, retention=None):
            assert await _dead_limits(srv.url) == (7200.0, 2_000_000)

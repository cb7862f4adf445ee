"""The NATS history on a real ``nats-server`` with JetStream: two replicas share one stream (either answers
for both, newest first, filtered, read backwards in bounded windows), the stream carries the retention
flags as limits, the live tail shows the other replica's records, and a reader creates nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import nats
import pytest

from notification_controller.history import nats as backend
from notification_controller.history import open_history
from notification_controller.history.model import Outcome, Query, Record, new_record_id
from notification_controller.history.nats import NATSConnection, NATSHistory
from notification_controller.settings import HistorySettings
from tests.support.nats_server import NATSServer, run_nats_server

BASE = time.time() - 600


def rec(i: int, outcome: Outcome = Outcome.DELIVERED, message: str = "m") -> Record:
    return Record(new_record_id(), BASE + i / 100, f"e{i}", f"n{i}", f"Kustomization/ns/app{i % 4}", "info", "R",
                  message, f"ns/a{i % 2}", "ns/p", "generic", outcome)  # fmt: skip


@pytest.fixture
async def server() -> AsyncIterator[NATSServer]:
    async with run_nats_server(jetstream=True) as s:
        yield s


async def published(history: NATSHistory, n: int, q: Query | None = None) -> list[Record]:
    async with asyncio.timeout(30):
        while True:
            if not history._buffer:
                found = await history.query(q or Query(limit=1000))
                if len(found) >= n:
                    return found
            await asyncio.sleep(0.05)


async def test_two_replicas_share_one_history(server: NATSServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "WINDOW", 7)  # several backward windows
    a = NATSHistory(NATSConnection([server.url]), max_age=3600, max_bytes=1 << 20)
    b = NATSHistory(NATSConnection([server.url]), max_age=3600, max_bytes=1 << 20)
    await a.start()
    await b.start()
    try:
        for i in range(40):
            (a if i % 2 else b).record(rec(i, Outcome.FAILED if i % 5 == 0 else Outcome.DELIVERED))
        everything = await published(a, 40)
        assert [r.event_id for r in everything] == [f"e{i}" for i in range(39, -1, -1)]
        from_b = await b.query(Query(outcome="failed", limit=3))
        assert [r.event_id for r in from_b] == ["e35", "e30", "e25"]
        assert [
            r.event_id for r in await b.query(Query(alert="ns/a1", object="Kustomization/ns/app3", limit=2))
        ] == [
            "e39",
            "e35",
        ]
        assert [r.event_id for r in await a.query(Query(since=BASE + 0.365))] == ["e39", "e38", "e37"]
        nc = await nats.connect(server.url)
        try:
            info = await nc.jetstream().stream_info("NC_HISTORY")
            assert info.config.max_age == 3600 and info.config.max_bytes == 1 << 20
            consumers = await nc.jetstream().consumers_info("NC_HISTORY")
            assert consumers == []  # every read's consumer is deleted
        finally:
            await nc.close()
    finally:
        await a.close()
        await b.close()


async def test_the_stream_keeps_within_its_bytes(server: NATSServer) -> None:
    history = NATSHistory(NATSConnection([server.url], prefix="small"), max_bytes=100_000)
    await history.start()
    try:
        for i in range(500):
            history.record(rec(i, message="x" * 1000))
        async with asyncio.timeout(30):
            while history._buffer:
                await asyncio.sleep(0.05)
        nc = await nats.connect(server.url)
        try:
            async with asyncio.timeout(30):
                while (await nc.jetstream().stream_info("SMALL_HISTORY")).state.last_seq < 500:
                    await asyncio.sleep(0.05)
            state = (await nc.jetstream().stream_info("SMALL_HISTORY")).state
            assert state.bytes <= 100_000 and state.messages < 100
        finally:
            await nc.close()
        newest = await history.query(Query(limit=5))
        assert [r.event_id for r in newest] == ["e499", "e498", "e497", "e496", "e495"]
    finally:
        await history.close()


async def test_the_live_tail_shows_every_replicas_records(server: NATSServer) -> None:
    a = NATSHistory(NATSConnection([server.url]))
    b = NATSHistory(NATSConnection([server.url]))
    await a.start()
    await b.start()
    try:
        tail = a.subscribe()
        async with asyncio.timeout(30):
            while a._tail is None or a._tail == "opening":
                await asyncio.sleep(0.02)
            nxt = asyncio.ensure_future(anext(tail))
            await asyncio.sleep(0.05)
            b.record(rec(1))
            got = await nxt
        assert got.event_id == "e1"
    finally:
        await a.close()
        await b.close()


async def test_a_reader_creates_nothing(server: NATSServer) -> None:
    reader = open_history(HistorySettings(), f"nats://127.0.0.1:{server.port}?prefix=ro", read_only=True)
    assert isinstance(reader, NATSHistory)
    await reader.start()
    try:
        assert await reader.query(Query()) == []
    finally:
        await reader.close()
    nc = await nats.connect(server.url)
    try:
        assert await nc.jetstream().streams_info() == []
    finally:
        await nc.close()

"""The history under attack (issue 27): what a client controls cannot grow it without bound, nor slow a POST.

* 100,000 decisions with 64 KB messages and reasons into the memory ring: it keeps ``--history-max-records``
  and every text is cut to 1 KiB (the ring's memory is bounded by records × ~2 KiB, measured);
* the same into the SQLite history with a 2 MiB budget: the table stays within it and the file stops
  growing (pages are reused);
* a writer that cannot write (another process holds the file's write lock): ``record`` still returns at
  once, the buffer stops at its bound and counts what it drops, and writing resumes once the lock is gone;
* a real controller process (SQLite store, ``--history-max-bytes=1MiB``) flooded with 64 KB events and bad
  POSTs: every POST answered, the file bounded, refusals recorded within their budget.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import tracemalloc
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.core.redact import Redactor
from notification_controller.history import sqlite as backend
from notification_controller.history.memory import MemoryHistory
from notification_controller.history.model import MAX_TEXT, Outcome, Query
from notification_controller.history.recorder import REFUSED_BURST, Recorder
from notification_controller.history.sqlite import SQLiteHistory
from notification_controller.metrics import HistoryMetrics
from tests.support.controllers import ControllerProcess, FlakySink, event, manifests

pytestmark = pytest.mark.slow

BIG = "x" * 65536


def big_event(i: int) -> Event:
    return Event.from_raw(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": "ns", "name": f"app{i}"},
            "severity": "error",
            "message": f"{i} {BIG}",
            "reason": BIG,
            "reportingController": "kustomize-controller",
        }
    )


async def test_a_flood_into_the_ring_is_bounded_in_records_and_bytes() -> None:
    history = MemoryHistory(max_records=10_000)
    recorder = Recorder(history, Redactor())
    events = [big_event(i) for i in range(100)]  # 100 distinct 128 KB events, recorded 1,000 times each
    tracemalloc.start()
    try:
        for i in range(100_000):
            recorder.record(Outcome.UNMATCHED, events[i % 100], f"e{i}", detail=BIG)
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(history) == 10_000
    newest = (await history.query(Query(limit=1)))[0]
    assert newest.event_id == "e99999"
    assert len(newest.message) == len(newest.reason) == len(newest.detail) == MAX_TEXT
    # 10,000 records of three 1 KiB texts each: ~30 MB if every text were its own copy; far less here
    assert current < 40 << 20, current


async def test_a_flood_into_sqlite_stays_within_its_bytes(tmp_path: Path) -> None:
    budget = 2 << 20
    history = SQLiteHistory(tmp_path / "s.db", max_bytes=budget)
    await history.start()
    recorder = Recorder(history, Redactor())
    events = [big_event(i) for i in range(100)]
    sizes = []
    try:
        for i in range(100_000):
            recorder.record(Outcome.DROPPED, events[i % 100], f"e{i}", detail=BIG)
            if i % 5000 == 4999:  # let the writer keep up (a flood faster than the disk drops, counted)
                async with asyncio.timeout(60):
                    while history._buffer:
                        await asyncio.sleep(0.01)
                sizes.append(sum(p.stat().st_size for p in tmp_path.iterdir()))
        async with asyncio.timeout(60):
            while history.written + history.dropped < 100_000 or history.total_bytes > budget:
                await asyncio.sleep(0.05)
    finally:
        await history.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        (total,) = conn.execute("SELECT SUM(size) FROM history").fetchone()
    finally:
        conn.close()
    assert total <= budget
    # the file (with its WAL) stops growing once the budget is reached: freed pages are reused
    assert max(sizes[-5:]) < 4 * budget + (4 << 20), sizes
    assert max(sizes[-5:]) <= max(sizes[:10]) * 1.5, sizes


async def test_a_writer_that_cannot_write_never_holds_the_recorder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a lock wait of 3 s per try: a record that waited on the writer would take at least that long, so the
    # bound below tells a blocked recorder from a loaded machine's pause (a GC pass, the writer thread's turn)
    monkeypatch.setattr(backend, "BUSY_TIMEOUT", 3.0)
    path = tmp_path / "s.db"
    registry = CollectorRegistry()
    history = SQLiteHistory(path, metrics=HistoryMetrics(registry))
    await history.start()
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # as a sqlite3 shell, or the store's writer stuck on a full disk
    recorder = Recorder(history, Redactor(), HistoryMetrics(CollectorRegistry()))
    e = big_event(0)
    slowest = 0.0
    try:
        for i in range(3 * backend.BUFFER):
            started = time.perf_counter()
            recorder.record(Outcome.DELIVERED, e, f"e{i}")
            slowest = max(slowest, time.perf_counter() - started)
        assert slowest < 1.0, slowest  # never the writer's lock wait (3 s per try)
        assert len(history._buffer) <= backend.BUFFER
        assert (registry.get_sample_value("notification_history_dropped_total") or 0) >= backend.BUFFER
    finally:
        lock.execute("COMMIT")
        lock.close()
    async with asyncio.timeout(60):  # the lock is gone: what the buffer kept is written
        while history._buffer:
            await asyncio.sleep(0.05)
    assert history.written >= 1
    await history.close()


async def test_a_controller_flooded_with_big_and_bad_events_stays_bounded(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    async with FlakySink() as sink:
        proc = ControllerProcess(
            manifests(tmp_path / "m", sink.url),
            [f"--store=sqlite:{db}", "--history-max-bytes=1048576", "--store-ack-wait=2s"],
            log_path=tmp_path / "c.log",
        )
        await proc.start()
        try:
            codes: list[int] = []
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(timeout=timeout) as session:

                async def post(i: int) -> None:
                    body = event(f"app{i}", f"{i} {BIG}", reason="R" * 65536)
                    if i % 3 == 0:
                        body["involvedObject"]["kind"] = "Bucket"  # unmatched
                    async with session.post(proc.events_url, json=body) as resp:
                        codes.append(resp.status)
                    async with session.post(proc.events_url, data=b"{" + BIG.encode()) as resp:
                        codes.append(resp.status)

                for start in range(0, 1500, 50):
                    await asyncio.gather(*(post(i) for i in range(start, start + 50)))
            assert codes.count(202) == 1500 and codes.count(400) == 1500, sorted(set(codes))
            async with asyncio.timeout(60):
                while await proc.metric("notification_history_records_total", outcome="unmatched") < 500:
                    await asyncio.sleep(0.2)
            refused = await proc.metric("notification_history_records_total", outcome="refused")
            assert REFUSED_BURST <= refused < 1500  # the rest counted as dropped, not recorded
            assert await proc.metric("notification_history_dropped_total") >= 1500 - refused
            await asyncio.sleep(1.0)  # a flush or two
            conn = sqlite3.connect(db)
            try:
                (total,) = conn.execute("SELECT SUM(size) FROM history").fetchone()
                (longest,) = conn.execute("SELECT MAX(LENGTH(data)) FROM history").fetchone()
                sample = json.loads(conn.execute("SELECT data FROM history LIMIT 1").fetchone()[0])
            finally:
                conn.close()
            assert total <= 1 << 20 and longest < 8 * MAX_TEXT
            assert len(sample["message"]) <= MAX_TEXT and len(sample["reason"]) <= MAX_TEXT
        finally:
            assert await proc.stop() == 0

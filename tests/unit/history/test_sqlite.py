"""The SQLite history on a real file: written by its own thread, read by queries (filters, newest first),
kept across a restart, retention by age and by bytes, a bounded buffer, read-only readers."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.errors import StoreError
from notification_controller.history import open_history
from notification_controller.history import sqlite as backend
from notification_controller.history.model import Outcome, Query, Record, new_record_id
from notification_controller.history.sqlite import SQLiteHistory
from notification_controller.metrics import HistoryMetrics
from notification_controller.settings import HistorySettings

BASE = time.time() - 3600  # within the default --history-max-age


def rec(i: int, *, t: float | None = None, outcome: Outcome = Outcome.DELIVERED, alert: str = "ns/a",
        message: str = "m") -> Record:  # fmt: skip
    return Record(new_record_id(), BASE + i if t is None else t, f"e{i}", f"n{i}",
                  f"Kustomization/ns/app{i % 3}", "info", "R", message, alert, "ns/p", "generic", outcome)  # fmt: skip


async def written(history: SQLiteHistory, n: int) -> None:
    async with asyncio.timeout(30):
        while history.written < n:
            await asyncio.sleep(0.02)


async def test_records_are_written_queried_and_kept_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    history = SQLiteHistory(path)
    await history.start()
    for i in range(30):
        history.record(
            rec(i, outcome=Outcome.FAILED if i % 3 == 0 else Outcome.DELIVERED, alert=f"ns/a{i % 2}")
        )
    assert len(await history.query(Query(limit=1000))) == 30  # written or not yet: all of them
    await written(history, 30)
    await history.close()
    assert path.stat().st_mode & 0o077 == 0

    again = SQLiteHistory(path)
    await again.start()
    try:
        everything = await again.query(Query(limit=1000))
        assert [r.event_id for r in everything] == [f"e{i}" for i in range(29, -1, -1)]  # newest first
        failed = await again.query(Query(outcome="failed", alert="ns/a1"))
        assert [r.event_id for r in failed] == ["e27", "e21", "e15", "e9", "e3"]
        assert [r.event_id for r in await again.query(Query(object="Kustomization/ns/app1", limit=2))] == [
            "e28",
            "e25",
        ]
        window = await again.query(Query(since=BASE + 10, until=BASE + 12))
        assert [r.event_id for r in window] == ["e12", "e11", "e10"]
        assert (await again.query(Query(event_id="e7")))[0].notification_id == "n7"
        assert await again.query(Query(notification_id="n8"))
    finally:
        await again.close()


async def test_retention_by_age(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "SWEEP_INTERVAL", 0.05)
    now = [time.time()]
    history = SQLiteHistory(tmp_path / "s.db", max_age=3600, now=lambda: now[0])
    await history.start()
    try:
        for i in range(10):
            history.record(rec(i, t=now[0] - 7200 + i))  # two hours old
        for i in range(10, 15):
            history.record(rec(i, t=now[0] - 60))
        await written(history, 15)
        async with asyncio.timeout(30):
            while len(await history.query(Query())) > 5:
                await asyncio.sleep(0.05)
        assert sorted(r.event_id for r in await history.query(Query())) == [f"e{i}" for i in range(10, 15)]
        now[0] += 3600  # an hour later the others are too old
        async with asyncio.timeout(30):
            while await history.query(Query()):
                await asyncio.sleep(0.05)
        assert history.total_bytes == 0
    finally:
        await history.close()


async def test_retention_by_bytes_keeps_the_newest(tmp_path: Path) -> None:
    history = SQLiteHistory(tmp_path / "s.db", max_bytes=200_000)
    await history.start()
    try:
        for i in range(2000):
            history.record(rec(i, message="x" * 400))
            if i % 200 == 199:
                await written(history, i + 1)
        await written(history, 2000)
        async with asyncio.timeout(30):
            while history.total_bytes > 200_000:
                await asyncio.sleep(0.05)
        kept = await history.query(Query(limit=1000))
        assert kept[0].event_id == "e1999" and 100 < len(kept) < 600
        conn = sqlite3.connect(tmp_path / "s.db")
        try:
            total = conn.execute("SELECT SUM(size) FROM history").fetchone()[0]
        finally:
            conn.close()
        assert total == history.total_bytes <= 200_000
    finally:
        await history.close()


async def test_a_full_buffer_drops_and_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "BUFFER", 10)
    registry = CollectorRegistry()
    history = SQLiteHistory(
        tmp_path / "s.db", metrics=HistoryMetrics(registry)
    )  # not started: nothing drains
    for i in range(25):
        history.record(rec(i))
    assert history.dropped == 15
    assert registry.get_sample_value("notification_history_dropped_total") == 15
    assert registry.get_sample_value("notification_history_records_total", {"outcome": "delivered"}) == 10


async def test_a_reader_changes_nothing(tmp_path: Path) -> None:
    missing = open_history(HistorySettings(), f"sqlite:{tmp_path}/none.db", read_only=True)
    assert missing is not None
    with pytest.raises(StoreError, match="no such database file"):
        await missing.start()
    assert not (tmp_path / "none.db").exists()
    sqlite3.connect(tmp_path / "empty.db").execute("CREATE TABLE outbox (x)").connection.close()
    reader = open_history(HistorySettings(), f"sqlite:{tmp_path}/empty.db?synchronous=full", read_only=True)
    assert isinstance(reader, SQLiteHistory)
    await reader.start()
    assert await reader.query(Query()) == []  # the controller has not recorded yet: no table, no error


async def test_a_start_refused_by_a_lock_can_be_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "BUSY_TIMEOUT", 0.1)
    path = tmp_path / "s.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE outbox (x)")
    holder.execute("BEGIN EXCLUSIVE")  # the store's writer, busy
    history = SQLiteHistory(path)
    try:
        with pytest.raises(StoreError, match="locked"):
            await history.start()
        holder.execute("COMMIT")
        await history.start()  # the app's retry
        history.record(rec(1))
        await written(history, 1)
    finally:
        holder.close()
        await history.close()

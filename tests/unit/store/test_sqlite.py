"""The SQLite store's writer thread and retention sweep, on real files, in process (issue 23 items 4, 9).

The attacks against a real controller process are in ``tests/adversarial/test_sqlite_store.py``; here the
rules underneath: a batch that fails cannot end the thread, a call answered "not written" is not written,
``close`` is bounded, and the sweep deletes exactly what retention says (time moves on a ``ManualClock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from notification_controller.errors import StoreError
from notification_controller.lib.clock import ManualClock
from notification_controller.store.base import NewItem, Retention
from notification_controller.store.sqlite import _STOP, SWEEP_CHUNK, SQLiteStore

DAY = 86400.0


@contextlib.asynccontextmanager
async def started(store: SQLiteStore) -> AsyncIterator[SQLiteStore]:
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def test_a_batch_whose_commit_machinery_fails_does_not_end_the_writer_thread(tmp_path: Path) -> None:
    """A call that ends the transaction itself makes the batch's ``RELEASE``/``COMMIT`` fail: that batch
    fails, and the thread goes on. Before the fix the failure handler itself raised (``for future, loop, *_
    in batch`` over ``(fn, future, loop)``), the thread died and every later call waited for ever."""
    async with started(SQLiteStore(tmp_path / "s.db")) as store:
        with pytest.raises(StoreError):
            await store._run(lambda c: c.execute("COMMIT"))
        assert store._writer is not None and store._writer.alive
        async with asyncio.timeout(10):  # a dead thread: no answer, ever
            await store.append([NewItem("after", "lane", b"x")])
            assert (await store.stats())["lane"].depth == 1
            await store.ping()


async def test_once_the_writer_thread_has_ended_every_call_fails_at_once(tmp_path: Path) -> None:
    """``alive`` is a flag the thread clears as it ends (not ``Thread.is_alive()`` per call): a call made
    after the thread ended fails with a clear error instead of waiting for an answer that cannot come."""
    async with started(SQLiteStore(tmp_path / "s.db", timeout=30)) as store:
        writer, thread = store._writer, store._writer._thread if store._writer else None
        assert writer is not None and thread is not None
        running = writer.alive
        writer._queue.put(_STOP)  # the thread ends as at shutdown
        await asyncio.to_thread(thread.join, 10)
        assert running and not thread.is_alive() and not writer.alive
        async with asyncio.timeout(5):  # far under the call's own 30 s deadline
            with pytest.raises(StoreError, match="writer thread is not running"):
                await store.append([NewItem("late", "lane", b"x")])


async def test_while_another_connection_holds_the_lock_calls_fail_in_time_and_write_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with started(SQLiteStore(path, timeout=0.5, busy_timeout=0.5)) as store:
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            began = time.monotonic()
            results = await asyncio.gather(
                *(store.append([NewItem(f"i{i}", "lane", b"x")]) for i in range(20)),
                store.ping(),
                return_exceptions=True,
            )
            took = time.monotonic() - began
        finally:
            holder.execute("COMMIT")
            holder.close()
        assert all(isinstance(r, StoreError) for r in results), results
        assert took < 3.0, took  # 0.5 s deadline, a loaded machine
        assert store._writer is not None and store._writer.alive
        assert await store.stats() == {}  # "not written" was true: nothing appeared after the lock went
        await store.append([NewItem("after", "lane", b"x")])
        assert (await store.stats())["lane"].depth == 1


async def test_close_is_bounded_while_the_file_stays_locked(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path, timeout=0.5, busy_timeout=0.5)
    await store.start()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        pending = [asyncio.ensure_future(store.append([NewItem(f"i{i}", "l", b"x")])) for i in range(50)]
        await asyncio.sleep(0.1)
        began = time.monotonic()
        await store.close()
        assert time.monotonic() - began < 3.0
        results = await asyncio.gather(*pending, return_exceptions=True)
        assert all(isinstance(r, StoreError) for r in results)
    finally:
        holder.execute("COMMIT")
        holder.close()


async def _dead_letter(store: SQLiteStore, id_: str, payload: bytes, error: str = "boom") -> None:
    await store.append([NewItem(id_, "lane", payload)])
    lease = await store.lease("lane")
    assert lease is not None and lease.id == id_
    await store.dead_letter(lease, reason="permanent", error=error)


async def test_the_sweep_deletes_expired_keys_and_dead_letters_past_age_or_size(tmp_path: Path) -> None:
    clock = ManualClock()
    retention = Retention(dead_letter_max_age=14 * DAY, dead_letter_max_bytes=10_000)
    store = SQLiteStore(tmp_path / "s.db", clock=clock, retention=retention, sweep_interval=3600)
    async with started(store):
        await store.seen("short", 60)
        await store.seen("long", 30 * DAY)
        await store.kv_put("noise/a", b"1", ttl=60)
        await store.kv_put("noise/b", b"2", ttl=30 * DAY)
        await store.kv_put("forever", b"3")
        await _dead_letter(store, "old", b"o" * 100)
        clock.advance(13 * DAY)
        for i in range(5):  # 5 × ~3 KB: the two oldest of them do not fit in 10,000 bytes
            await _dead_letter(store, f"d{i}", b"p" * 3000)
        clock.advance(1 * DAY + 120)  # "old" died 14 days and 2 minutes ago; "short"/"noise/a" expired
        deleted = await store.sweep()
        assert deleted == {"seen": 1, "kv": 1, "dead_letters_age": 1, "dead_letters_size": 2}
        assert [d.id for d in await store.dead_letters()] == ["d2", "d3", "d4"]
        assert await store.kv_get("noise/b") is not None and await store.kv_get("forever") is not None
        assert await store.seen("long", 30 * DAY) is True  # live keys stay
        assert await store.sweep() == dict.fromkeys(deleted, 0)  # nothing more is due


async def test_a_backlog_longer_than_a_chunk_is_swept_in_one_sweep(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SQLiteStore(tmp_path / "s.db", clock=clock, retention=Retention(DAY, 0), sweep_interval=3600)
    async with started(store):
        now = clock.now().timestamp()
        keys = [(f"k{i}", now - 1) for i in range(SWEEP_CHUNK * 2 + 10)]
        await store._run(lambda c: c.executemany("INSERT INTO seen (key, expires_at) VALUES (?, ?)", keys))
        assert (await store.sweep())["seen"] == len(keys)
        assert await store._run(lambda c: c.execute("SELECT COUNT(*) FROM seen").fetchone()[0]) == 0


async def test_the_freed_pages_go_back_to_the_file_system(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    clock = ManualClock()
    store = SQLiteStore(path, clock=clock, retention=Retention(DAY, 0), sweep_interval=3600)
    async with started(store):
        for i in range(300):
            await _dead_letter(store, f"d{i}", b"x" * 20_000)
        wal = path.with_name(path.name + "-wal")
        await store._run(lambda c: c.execute("SELECT 1"))
        full = path.stat().st_size
        clock.advance(2 * DAY)
        assert (await store.sweep())["dead_letters_age"] == 300
        assert path.stat().st_size < full / 10, (full, path.stat().st_size)
        assert not wal.exists() or wal.stat().st_size < 1 << 20


async def test_without_retention_nothing_is_deleted(tmp_path: Path) -> None:
    """The ``dead-letters`` command opens the store without retention: listing never deletes."""
    clock = ManualClock()
    async with started(SQLiteStore(tmp_path / "s.db", clock=clock)) as store:
        await _dead_letter(store, "old", b"x")
        clock.advance(365 * DAY)
        with pytest.raises(StoreError, match="without retention"):
            await store.sweep()
        assert [d.id for d in await store.dead_letters()] == ["old"]


async def test_an_old_file_is_switched_to_incremental_vacuum_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE legacy (x)")  # a file created by an older version: auto_vacuum NONE
    assert _auto_vacuum(path) == 0
    async with started(SQLiteStore(path)):  # the dead-letters command: leaves it as it is
        pass
    assert _auto_vacuum(path) == 0
    async with started(SQLiteStore(path, retention=Retention(DAY, 0))):
        pass
    assert _auto_vacuum(path) == 2


def _auto_vacuum(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])

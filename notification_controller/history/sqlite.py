"""The history with ``--store=sqlite:PATH``: a table in the store's database file, so it survives restarts.

**Never on the pipeline's path.** ``record`` appends to a bounded in-memory buffer (``BUFFER`` records; a
full buffer drops the record and counts ``notification_history_dropped_total``) and returns; a writer thread
owns its own connection (as ``store/sqlite.py``'s does: the event loop never touches the disk) and inserts
what accumulated every ``FLUSH_INTERVAL`` seconds, or as soon as ``BATCH`` records wait, in transactions of
``BATCH`` records (the WAL grows by one such transaction at most, and is cut back to 4 MiB). A POST or a delivery therefore never waits on the disk, and SQLite's write lock is taken for a few
milliseconds per batch, shared fairly with the store's own writer (both wait for the lock a bounded time:
a batch that cannot get it is retried at the next flush). Queries read on a thread with a connection of
their own (WAL: readers do not block the writers) and see the records not yet written too.

**Schema**: table ``history`` — the filter columns (time, ids, object, alert, provider, outcome), the
record as JSON, and its size — with an index per filter, each ending in ``time`` so that "newest first"
walks the index. The store's ``PRAGMA user_version`` is the store's: this table is versioned by its name.

**Retention** (``--history-max-age``, ``--history-max-bytes``): the writer deletes, oldest first and in
chunks of ``SWEEP_CHUNK`` rows, what is older than the age and what exceeds the byte budget. The budget
counts each row's JSON and its indexed texts (``row_bytes``, a close estimate of what the table and its
indexes hold); the running total is read at open and kept up to date by the writer, so the sweep costs
nothing while under the budget. Freed pages are reused by later inserts, and the store's own maintenance
gives free pages back to the file system (``auto_vacuum=INCREMENTAL``, set here too when the history
creates the file). ``synchronous=NORMAL``: a committed batch survives SIGKILL; a power loss may lose the
last batches (the records in the buffer are lost on SIGKILL: at most ``FLUSH_INTERVAL`` seconds of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson

from ..errors import StoreError
from ..metrics import HistoryMetrics
from .live import Fanout
from .model import _OUTCOME, Query, Record, Row

log = logging.getLogger(__name__)

BUFFER = 10_000
"""Records waiting for the writer at most; beyond, a record is dropped and counted."""
BATCH = 500
"""Records that wake the writer before its interval."""
FLUSH_INTERVAL = 0.25
"""Seconds between two writes at most (what SIGKILL may lose)."""
SWEEP_INTERVAL = 30.0
"""Seconds between two retention sweeps by age (the byte budget is checked after every write)."""
SWEEP_CHUNK = 2000
"""Rows one retention statement deletes at most (a few ms of write lock)."""
BUSY_TIMEOUT = 2.0
"""Seconds the writer waits for the store's write lock before it tries again at the next flush."""
JOURNAL_SIZE_LIMIT = 4 << 20
"""Bytes a checkpointed WAL is cut back to (as the store's connection does)."""
ROW_OVERHEAD = 64
"""Bytes counted per row beyond its texts: rowid, numbers, the index entries' own keys."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS history (
    id              TEXT NOT NULL,
    time            REAL NOT NULL,
    event_id        TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    object          TEXT NOT NULL,
    alert           TEXT NOT NULL,
    provider        TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    size            INTEGER NOT NULL,
    data            BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS history_time ON history (time);
CREATE INDEX IF NOT EXISTS history_event ON history (event_id, time);
CREATE INDEX IF NOT EXISTS history_notification ON history (notification_id, time);
CREATE INDEX IF NOT EXISTS history_object ON history (object, time);
CREATE INDEX IF NOT EXISTS history_alert ON history (alert, time);
CREATE INDEX IF NOT EXISTS history_provider ON history (provider, time);
CREATE INDEX IF NOT EXISTS history_outcome ON history (outcome, time);
"""

_FILTERS = (
    ("event_id", "event_id"),
    ("notification_id", "notification_id"),
    ("object", "object"),
    ("alert", "alert"),
    ("provider", "provider"),
    ("outcome", "outcome"),
)


def row_bytes(data: bytes, r: Record) -> int:
    """What one row costs in the table and its indexes, counted against ``--history-max-bytes``."""
    texts = len(r.id) + len(r.event_id) + len(r.notification_id) + len(r.object) + len(r.alert)
    return len(data) + 2 * (texts + len(r.provider) + len(r.outcome)) + ROW_OVERHEAD


def _private(path: Path) -> None:
    """Create the file 0600 (it holds what events said), as the store does."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.close(fd)


def _connect(path: Path, *, create: bool) -> sqlite3.Connection:
    if create:
        _private(path)
    uri = f"file:{path}?mode={'rwc' if create else 'ro'}"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
    return conn


class SQLiteHistory:
    """See the module docstring. ``read_only``: the ``history`` command — nothing created, nothing deleted."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_age: float = 7 * 24 * 3600.0,
        max_bytes: int = 64 << 20,
        metrics: HistoryMetrics | None = None,
        read_only: bool = False,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.read_only = read_only
        self.now = now
        self._buffer: deque[Row] = deque()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._live = Fanout()
        self.total_bytes = 0  # the writer's count of the table's bytes (row_bytes) and rows
        self.rows = 0
        self.written = 0
        self.dropped = 0

    # ---- lifecycle --------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.read_only:
            if not self.path.is_file():
                raise StoreError(f"sqlite history {self.path}: no such database file")
            return
        if self._thread is not None:
            return
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(
            target=self._main, args=(opened, loop), name="history-sqlite", daemon=True
        )
        self._thread.start()
        try:
            await opened
        except BaseException:
            self._thread = None  # the thread has ended: a later start tries again
            raise

    async def close(self) -> None:
        self._live.close()
        thread = self._thread
        if thread is None:
            return
        self._stop = True
        self._wake.set()
        await asyncio.to_thread(thread.join, 10.0)  # the last batch is written before it ends
        self._thread = None

    # ---- recording: the pipeline's side -----------------------------------------------------------------
    def record(self, r: Record, /) -> None:
        self.record_row(r.row())

    def record_row(self, row: Row, /) -> None:
        buffer = self._buffer
        if len(buffer) >= BUFFER:
            self._drop_one()
            return
        buffer.append(row)
        if self.metrics is not None:
            self.metrics.recorded(row[_OUTCOME])
        if len(buffer) >= BATCH:
            self._wake.set()
        if self._live.subscribers:
            self._live.publish(Record.from_row(row))

    def subscribe(self) -> AsyncIterator[Record]:
        return self._live.subscribe()

    def _drop_one(self) -> None:
        self.dropped += 1
        if self.metrics is not None:
            self.metrics.dropped.inc()  # prometheus_client's counters are thread-safe

    # ---- the writer thread ------------------------------------------------------------------------------
    def _main(self, opened: asyncio.Future[None], loop: asyncio.AbstractEventLoop) -> None:
        try:
            conn = self._open()
        except Exception as exc:
            error = StoreError(f"sqlite history {self.path.name} cannot be opened: {exc}")
            loop.call_soon_threadsafe(_settle, opened, error)
            return
        loop.call_soon_threadsafe(_settle, opened, None)
        next_sweep = 0.0
        try:
            while True:
                self._wake.wait(FLUSH_INTERVAL)
                self._wake.clear()
                stopping = self._stop
                try:
                    while self._buffer:  # a transaction per BATCH: the WAL grows by one batch at most
                        self._flush(conn)
                        if self.total_bytes > self.max_bytes:
                            self.sweep_bytes(conn)
                    if time.monotonic() >= next_sweep:
                        self.sweep_age(conn)
                        next_sweep = time.monotonic() + SWEEP_INTERVAL
                except sqlite3.Error as exc:  # locked by the store, disk full: try again next time
                    log.warning("history: could not write to %s: %s", self.path.name, exc)
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                except Exception as exc:  # a bug: the thread must live on (records would pile up unwritten)
                    log.error("history: writer failed: %s: %s", type(exc).__name__, exc)
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if stopping:
                    return
        finally:
            conn.close()

    def _open(self) -> sqlite3.Connection:
        conn = _connect(self.path, create=True)
        try:
            if int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0:
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # as the store does on a file it creates
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")  # per connection, as the store's
            conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
            total, rows = conn.execute("SELECT COALESCE(SUM(size), 0), COUNT(*) FROM history").fetchone()
            self.total_bytes, self.rows = int(total), int(rows)
        except BaseException:
            conn.close()
            raise
        return conn

    def _flush(self, conn: sqlite3.Connection) -> None:
        buffer = self._buffer
        if not buffer:
            return
        batch: list[Row] = []
        while buffer and len(batch) < BATCH:
            batch.append(buffer.popleft())
        rows = []
        added = 0
        for row in batch:
            r = Record.from_row(row)  # made here, in the writer thread, not on the pipeline's path
            try:
                data = orjson.dumps(r.to_json())
            except (TypeError, ValueError, OverflowError) as exc:  # cannot happen with a Record; counted
                log.error("history: record not serialisable: %s", exc)
                self._drop_one()
                continue
            size = row_bytes(data, r)
            added += size
            rows.append(
                (r.id, r.time, r.event_id, r.notification_id, r.object, r.alert, r.provider, r.outcome.value,
                 size, data)
            )  # fmt: skip
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO history VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")
        except sqlite3.Error:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            buffer.extendleft(reversed(batch))  # kept for the next flush (the buffer's bound still holds)
            while len(buffer) > BUFFER:
                buffer.pop()
                self._drop_one()
            raise
        self.total_bytes += added
        self.rows += len(rows)
        self.written += len(rows)

    def _delete(
        self, conn: sqlite3.Connection, where: str, args: tuple[Any, ...], limit: int = SWEEP_CHUNK
    ) -> int:
        """Delete the oldest rows ``where`` says, at most ``limit``; the number deleted."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            freed = conn.execute(
                f"DELETE FROM history WHERE rowid IN (SELECT rowid FROM history {where} ORDER BY time LIMIT ?) "  # noqa: S608 - constant clauses, values bound
                "RETURNING size",
                (*args, limit),
            ).fetchall()
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        self.total_bytes -= sum(size for (size,) in freed)
        self.rows -= len(freed)
        return len(freed)

    def sweep_age(self, conn: sqlite3.Connection) -> int:
        """Delete what is older than ``max_age``; the number of rows."""
        cutoff = self.now() - self.max_age
        deleted = 0
        while (n := self._delete(conn, "WHERE time < ?", (cutoff,))) == SWEEP_CHUNK:
            deleted += n
        return deleted + n

    def sweep_bytes(self, conn: sqlite3.Connection) -> int:
        """Delete the oldest rows until the table is within 90 % of ``max_bytes`` (room for the next
        batches, so that a full history is not swept after every write); the number of rows."""
        target = self.max_bytes * 0.9
        deleted = 0
        while self.total_bytes > target:
            average = self.total_bytes / max(self.rows, 1)
            n = self._delete(conn, "", (), min(SWEEP_CHUNK, int((self.total_bytes - target) / average) + 1))
            deleted += n
            if not n:
                self.total_bytes = self.rows = 0
                break
        return deleted

    # ---- queries ----------------------------------------------------------------------------------------
    async def query(self, q: Query, /) -> list[Record]:
        pending = [
            Record.from_row(row) for row in self._buffer.copy() if q.matches_row(row)
        ]  # not written yet
        stored = await asyncio.to_thread(self._select, q)
        merged = sorted([*pending, *stored], key=lambda r: r.id, reverse=True)
        seen: set[str] = set()
        out = []
        for r in merged:
            if r.id not in seen:
                seen.add(r.id)
                out.append(r)
        return out[: q.bounded_limit]

    def _select(self, q: Query) -> list[Record]:
        clauses, args = [], []
        for attr, column in _FILTERS:
            value = getattr(q, attr)
            if value:
                clauses.append(f"{column} = ?")
                args.append(value)
        if q.since is not None:
            clauses.append("time >= ?")
            args.append(q.since)
        if q.until is not None:
            clauses.append("time <= ?")
            args.append(q.until)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT data FROM history {where} ORDER BY time DESC, id DESC LIMIT ?"  # noqa: S608 - constant clauses
        try:
            conn = _connect(self.path, create=False)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite history {self.path.name}: {exc}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
            table = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'history'"
            if conn.execute(table).fetchone() is None:
                return []  # a store the controller has not recorded in yet
            rows = conn.execute(sql, (*args, q.bounded_limit)).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite history {self.path.name}: {exc}") from None
        finally:
            conn.close()
        out = []
        for (data,) in rows:
            try:
                out.append(Record.from_json(orjson.loads(data)))
            except ValueError:
                continue  # written by another version: skipped, not fatal
        return out


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)

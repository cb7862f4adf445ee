"""The ``sqlite:PATH`` store: one replica, durable on a local file (a PersistentVolume, or local mode).

Standard library ``sqlite3`` on one connection owned by a dedicated writer thread (``_Writer``): every call
is queued there, so the event loop never blocks on disk and the connection is never shared between threads
(no locking of our own; SQLite serialises writers across processes). **Group commit**: the thread takes
every call queued while it was busy and runs them in one transaction, each in its own savepoint (a failing
call rolls back alone), with one commit and so one fsync for the batch: under load the fsync cost is
shared by every event appended and every lease acknowledged meanwhile. A call's result is handed back only
after that commit, so ``append`` still returns only once its rows are durable.

**Durability.** WAL journal mode. ``synchronous=FULL`` by default: every commit fsyncs the WAL before
``append`` returns, so an item answered with 202 survives SIGKILL *and* power loss / a node crash. With
``?synchronous=normal`` the WAL is fsynced only at checkpoints: a committed transaction still survives
SIGKILL or an OOM kill (the kernel holds the written pages), but the last commits before a power loss or
kernel panic may be lost (the file stays consistent). ``append`` takes every notification of one event in
one transaction, so the fsync is paid once per event, not per notification.

**Leases** are a ``lease_until`` column (epoch seconds): ``lease`` picks the oldest due row whose lease is
absent or expired and stamps a new deadline and a random ``lease_token`` in one ``UPDATE ... RETURNING``.
A process killed mid-delivery leaves its row leased until the deadline; whoever leases after that gets
it again (at-least-once). ``ack``/``nack``/``dead_letter`` match the token, so a worker whose lease ran
out cannot remove an item another worker now holds.

**Schema** is versioned with ``PRAGMA user_version`` (``SCHEMA_VERSION``); a newer file than this code
knows is refused with ``StoreError`` rather than misread.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..core.clock import Clock, SystemClock
from ..errors import StoreError
from .base import DEFAULT_ACK_WAIT, DeadLetter, KVEntry, LaneStats, Lease, NewItem

T = TypeVar("T")

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    provider    TEXT NOT NULL,
    payload     BLOB NOT NULL,
    enqueued_at REAL NOT NULL,
    due_at      REAL NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    lease_until REAL NOT NULL DEFAULT 0,
    lease_token TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS outbox_lane ON outbox (provider, due_at, seq);
CREATE TABLE IF NOT EXISTS dead_letters (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    provider    TEXT NOT NULL,
    payload     BLOB NOT NULL,
    attempts    INTEGER NOT NULL,
    enqueued_at REAL NOT NULL,
    dead_at     REAL NOT NULL,
    reason      TEXT NOT NULL,
    error       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS seen (
    key        TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv (
    key        TEXT PRIMARY KEY,
    value      BLOB NOT NULL,
    revision   INTEGER NOT NULL,
    expires_at REAL
) WITHOUT ROWID;
"""

SYNCHRONOUS = ("full", "normal")


class SQLiteStore:
    kind = "sqlite"
    durable = True

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        clock: Clock | None = None,
        ack_wait: float = DEFAULT_ACK_WAIT,
        busy_timeout: float = 5.0,
    ) -> None:
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}")
        self.path = Path(path)
        self.synchronous = synchronous
        self.ack_wait = ack_wait
        self._busy_timeout = busy_timeout
        self._clock = clock or SystemClock()
        self._writer: _Writer | None = None
        self._seen_writes = 0

    def _now(self) -> float:
        return self._clock.now().timestamp()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        writer = self._writer
        if writer is None:
            raise StoreError("sqlite store is not started")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        writer.submit(fn, future, loop)
        return await future

    async def start(self) -> None:
        if self._writer is not None:
            return
        writer = _Writer(self.path, self.synchronous, self._busy_timeout)
        await writer.start()
        self._writer = writer

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.close()

    async def ping(self) -> None:
        await self._run(lambda c: c.execute("SELECT 1").fetchone())

    # ---- outbox ------------------------------------------------------------------------------------
    async def append(self, items: Sequence[NewItem]) -> None:
        if not items:
            return
        now = self._now()
        rows = [(i.id, i.provider, i.payload, now, now) for i in items]
        await self._run(
            lambda c: c.executemany(
                "INSERT OR IGNORE INTO outbox (id, provider, payload, enqueued_at, due_at) VALUES (?,?,?,?,?)",
                rows,
            )
        )

    async def lease(self, provider: str) -> Lease | None:
        now = self._now()
        token = uuid.uuid4().hex

        def pick(c: sqlite3.Connection) -> Lease | None:
            row = c.execute(
                "UPDATE outbox SET attempts = attempts + 1, lease_until = ?, lease_token = ? WHERE seq = ("
                " SELECT seq FROM outbox WHERE provider = ? AND due_at <= ? AND lease_until <= ?"
                " ORDER BY due_at, seq LIMIT 1)"
                " RETURNING id, provider, payload, attempts, enqueued_at",
                (now + self.ack_wait, token, provider, now, now),
            ).fetchone()
            if row is None:
                return None
            return Lease(row[0], row[1], bytes(row[2]), int(row[3]), float(row[4]), token)

        return await self._run(pick)

    async def ack(self, lease: Lease) -> None:
        await self._run(
            lambda c: c.execute(
                "DELETE FROM outbox WHERE id = ? AND lease_token = ?", (lease.id, lease.token)
            )
        )

    async def nack(self, lease: Lease, *, delay: float) -> None:
        due = self._now() + max(0.0, delay)
        await self._run(
            lambda c: c.execute(
                "UPDATE outbox SET due_at = ?, lease_until = 0, lease_token = '' WHERE id = ? AND lease_token = ?",
                (due, lease.id, lease.token),
            )
        )

    async def dead_letter(self, lease: Lease, *, reason: str, error: str) -> None:
        now = self._now()

        def move(c: sqlite3.Connection) -> None:
            row = c.execute(
                "DELETE FROM outbox WHERE id = ? AND lease_token = ?"
                " RETURNING id, provider, payload, attempts, enqueued_at",
                (lease.id, lease.token),
            ).fetchone()
            if row is not None:
                c.execute(
                    "INSERT OR REPLACE INTO dead_letters"
                    " (id, provider, payload, attempts, enqueued_at, dead_at, reason, error)"
                    " VALUES (?,?,?,?,?,?,?,?)",
                    (*row, now, reason, error),
                )

        await self._run(move)

    async def stats(self) -> dict[str, LaneStats]:
        now = self._now()
        rows = await self._run(
            lambda c: c.execute(
                "SELECT provider, COUNT(*), MIN(enqueued_at) FROM outbox GROUP BY provider"
            ).fetchall()
        )
        return {str(p): LaneStats(int(n), max(0.0, now - float(oldest))) for p, n, oldest in rows}

    # ---- dead letters --------------------------------------------------------------------------------
    async def dead_letters(self, *, provider: str | None = None, limit: int = 1000) -> list[DeadLetter]:
        query = (
            "SELECT id, provider, payload, attempts, enqueued_at, dead_at, reason, error FROM dead_letters"
        )
        params: tuple[object, ...] = ()
        if provider is not None:
            query += " WHERE provider = ?"
            params = (provider,)
        query += " ORDER BY seq LIMIT ?"
        rows = await self._run(lambda c: c.execute(query, (*params, limit)).fetchall())
        return [
            DeadLetter(
                str(r[0]), str(r[1]), bytes(r[2]), int(r[3]), float(r[4]), float(r[5]), str(r[6]), str(r[7])
            )
            for r in rows
        ]

    async def replay(self, ids: Sequence[str]) -> int:
        now = self._now()

        def move(c: sqlite3.Connection) -> int:
            count = 0
            for id_ in ids:
                row = c.execute(
                    "DELETE FROM dead_letters WHERE id = ? RETURNING id, provider, payload", (id_,)
                ).fetchone()
                if row is not None:
                    count += 1
                    c.execute(
                        "INSERT OR IGNORE INTO outbox (id, provider, payload, enqueued_at, due_at)"
                        " VALUES (?,?,?,?,?)",
                        (*row, now, now),
                    )
            return count

        return await self._run(move)

    async def drop(self, ids: Sequence[str]) -> int:
        def delete(c: sqlite3.Connection) -> int:
            return sum(c.execute("DELETE FROM dead_letters WHERE id = ?", (i,)).rowcount for i in ids)

        return await self._run(delete)

    # ---- duplicate window and KV ---------------------------------------------------------------------
    async def seen(self, key: str, ttl: float) -> bool:
        now = self._now()

        def check(c: sqlite3.Connection) -> bool:
            # Insert, or take over an expired key; no row changed means a live key: a duplicate.
            changed = c.execute(
                "INSERT INTO seen (key, expires_at) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at WHERE seen.expires_at <= ?",
                (key, now + ttl, now),
            ).rowcount
            self._seen_writes += 1
            if self._seen_writes % 1024 == 0:  # amortised sweep (the worker thread is the only writer)
                c.execute("DELETE FROM seen WHERE expires_at <= ?", (now,))
            return changed == 0

        return await self._run(check)

    async def forget(self, key: str, ttl: float) -> None:
        await self._run(lambda c: c.execute("DELETE FROM seen WHERE key = ?", (key,)))

    async def kv_get(self, key: str) -> KVEntry | None:
        now = self._now()
        row = await self._run(
            lambda c: c.execute(
                "SELECT value, revision FROM kv WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
                (key, now),
            ).fetchone()
        )
        return None if row is None else KVEntry(bytes(row[0]), int(row[1]))

    def _write(
        self,
        c: sqlite3.Connection,
        key: str,
        value: bytes,
        ttl: float | None,
        expected: int | None,
        check: bool,
    ) -> int | None:
        now = self._now()
        row = c.execute("SELECT revision, expires_at FROM kv WHERE key = ?", (key,)).fetchone()
        stored = int(row[0]) if row is not None else 0
        live = row is not None and (row[1] is None or float(row[1]) > now)
        if check and (stored if live else None) != expected:
            return None
        revision = stored + 1
        c.execute(
            "INSERT OR REPLACE INTO kv (key, value, revision, expires_at) VALUES (?,?,?,?)",
            (key, value, revision, None if ttl is None else now + ttl),
        )
        return revision

    async def kv_put(self, key: str, value: bytes, *, ttl: float | None = None) -> int:
        revision = await self._run(lambda c: self._write(c, key, value, ttl, None, False))
        assert revision is not None
        return revision

    async def kv_cas(
        self, key: str, value: bytes, *, expected: int | None, ttl: float | None = None
    ) -> int | None:
        return await self._run(lambda c: self._write(c, key, value, ttl, expected, True))


_STOP = object()
MAX_BATCH = 512


class _Writer:
    """The thread that owns the connection and group-commits queued calls (see the module docstring)."""

    def __init__(self, path: Path, synchronous: str, busy_timeout: float) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(
            target=self._main, args=(opened, loop), name="state-sqlite", daemon=True
        )
        self._thread.start()
        await opened

    def submit(self, fn: Callable[[sqlite3.Connection], Any], future: asyncio.Future[Any], loop: Any) -> None:
        self._queue.put((fn, future, loop))

    async def close(self) -> None:
        self._queue.put(_STOP)
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            conn.close()
            raise StoreError(
                f"sqlite store {self.path.name} has schema version {version}, "
                f"newer than this controller's {SCHEMA_VERSION}"
            )
        conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + f"PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
        return conn

    def _main(self, opened: asyncio.Future[None], loop: asyncio.AbstractEventLoop) -> None:
        try:
            conn = self._open()
        except (sqlite3.Error, StoreError) as exc:
            error = (
                exc
                if isinstance(exc, StoreError)
                else StoreError(f"sqlite store {self.path.name} cannot be opened: {exc}")
            )
            loop.call_soon_threadsafe(_settle, opened, None, error)
            return
        loop.call_soon_threadsafe(_settle, opened, None, None)
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    return
                batch = [first]
                stop = False
                while len(batch) < MAX_BATCH:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    batch.append(item)
                self._commit(conn, batch)
                if stop:
                    return
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[Any]) -> None:
        results: list[tuple[Any, Any, Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, future, loop in batch:
                conn.execute("SAVEPOINT call")
                try:
                    value = fn(conn)
                except Exception as exc:  # this call only: the others of the batch go on
                    conn.execute("ROLLBACK TO call")
                    conn.execute("RELEASE call")
                    error = (
                        StoreError(f"sqlite store {self.path.name}: {exc}")
                        if isinstance(exc, sqlite3.Error)
                        else exc
                    )
                    results.append((future, loop, None, error))
                    continue
                conn.execute("RELEASE call")
                results.append((future, loop, value, None))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:  # BEGIN or COMMIT failed (disk full, locked): nothing of the batch holds
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            failure = StoreError(f"sqlite store {self.path.name}: {exc}")
            results = [(future, loop, None, failure) for future, loop, *_ in batch]
        for future, loop, value, outcome in results:
            loop.call_soon_threadsafe(_settle, future, value, outcome)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)

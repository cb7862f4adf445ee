"""The ``sqlite:PATH`` store: one replica, durable on a local file (a PersistentVolume, or local mode).

Standard library ``sqlite3`` on one connection owned by a dedicated writer thread (``_Writer``): every call
is queued there, so the event loop never blocks on disk and the connection is never shared between threads
(no locking of our own; SQLite serialises writers across processes). **Group commit**: the thread takes
every call queued while it was busy and runs them in one transaction, each in its own savepoint (a failing
call rolls back alone; a call of one statement needs none: SQLite rolls a failed statement back), with one
commit and so one fsync for the batch: under load the fsync cost is shared by every event appended and
every lease acknowledged meanwhile. An ``append``'s result is handed back only after that commit, so it
still returns only once its rows are durable (the 202); what nothing durable depends on (a duplicate-window
claim, an ack, a read) is answered once executed, while the commit runs: a crash before the commit takes
the claim (the emitter's retry is admitted) or the ack (one redelivery) with it. The calls made during one
turn of the event loop reach the thread as one queue item, their deadlines on one timer, and the results of
a batch go back with one wake-up of the loop: no timer batches anything, a lone call is served at once.
Issue 29 item 4, measured with callgrind on the bench's one-``generic``-Provider delivery (16 connections):
2.17 M instructions per delivered notification before, 1.77 M after (the memory store: 0.92 M); CPU
(utime+stime, native) ~750 → ~550 µs against ~250-280 µs for the memory store. Per commit this disk costs
~95 µs of kernel CPU in the fsync alone (``synchronous=FULL``; ``normal`` 47 µs per seen+append at one per
transaction, 13 µs at 64).

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
knows is refused with ``StoreError`` rather than misread. Additions that older code ignores (an index, the
``probe`` table) keep the version.

**Bounded waits; a writer that cannot die** (issue 23 item 4). Another process holding the file's write
lock (``BEGIN EXCLUSIVE`` from a ``sqlite3`` shell), a full disk or a stuck volume must cost a 503, never a
hang. Every call has a deadline (``timeout``, 5 s: Flux's event recorder gives up on a POST after 5 s);
the caller stops waiting at it, and a call the thread has not begun by then is *abandoned*: it is never
executed (a claim under a lock decides between the caller and the thread), so "503" means "not written".
A call the thread had begun gets one more ``timeout`` for its commit, then the caller is told the outcome
is unknown. The thread waits for another process's lock only as long as the oldest call of the batch may
still wait. Any exception while running a batch (``BEGIN``/``COMMIT`` refused, ``SQLITE_FULL``, a broken
connection, a bug) fails that batch's calls and the thread goes on, reopening the connection if it has to;
``ping`` (readiness) writes one row through the same thread, so ``/readyz`` turns 503 while the file
cannot be written or the thread is gone, and ``close`` waits for the thread a bounded time.

**Retention** (item 9), when the store is opened with a ``Retention`` (the controller; never the
``dead-letters`` command): the thread sweeps, at open and every ``SWEEP_INTERVAL`` seconds, the expired
rows of every table with a time to live (``seen``, ``kv``), the dead letters older than
``dead_letter_max_age`` and, oldest first, those beyond ``dead_letter_max_bytes``, in chunks of
``SWEEP_CHUNK`` rows so that events are stored in between. The freed pages are given back to the file
system: ``auto_vacuum=INCREMENTAL`` (set on a new file; an existing file is converted once, with a
``VACUUM``, at open) and ``PRAGMA incremental_vacuum`` after a sweep, then a ``wal_checkpoint(TRUNCATE)``;
``journal_size_limit`` keeps the WAL from staying at its high-water mark. Measured on the 2-core
development machine (``synchronous=normal``, so that fsync does not hide the page work): an append+ack cycle
costs 80 µs with incremental auto-vacuum against 77 µs without; giving back the pages of 19,500 deleted
dead letters (82 MB → 2.7 MB) took 0.24 s in ``incremental_vacuum(1024)`` steps of at most 31 ms of write
lock each. A periodic full ``VACUUM`` was faster when little is live (0.01 s) but rewrites every live page
under one lock (0.51 s with 74 MB live, i.e. a provider outage's backlog), and needs as much free disk
again, so it fails exactly when the disk is full; the incremental steps need no room.

**Permissions.** The file is created ``0600`` (and an existing one tightened to it) before SQLite opens
it; SQLite creates ``-wal`` and ``-shm`` with the database file's mode. They hold every pending
notification, which may carry what an event said.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import queue
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..errors import StoreError
from ..lib.clock import Clock, SystemClock
from .base import DEFAULT_ACK_WAIT, DeadLetter, KVEntry, LaneStats, Lease, NewItem, Retention

log = logging.getLogger(__name__)

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
CREATE INDEX IF NOT EXISTS dead_letters_age ON dead_letters (dead_at);
CREATE TABLE IF NOT EXISTS probe (
    id   INTEGER PRIMARY KEY,
    at   REAL NOT NULL,
    room BLOB NOT NULL
);
"""

_APPEND = "INSERT OR IGNORE INTO outbox (id, provider, payload, enqueued_at, due_at) VALUES (?,?,?,?,?)"
_ACK = "DELETE FROM outbox WHERE id = ? AND lease_token = ?"
_APPEND_HELD = (
    "INSERT OR IGNORE INTO outbox (id, provider, payload, enqueued_at, due_at, attempts, lease_until, lease_token)"
    " VALUES (?,?,?,?,?,?,?,?)"
)

SYNCHRONOUS = ("full", "normal")
DEFAULT_TIMEOUT = 5.0
"""Seconds a call may wait for the store (queue, another process's lock, commit) before the caller gets a
``StoreError`` (a 503 on the event POST): Flux's event recorder abandons a POST after 5 s."""
SWEEP_INTERVAL = 60.0
"""Seconds between two retention sweeps."""
SWEEP_CHUNK = 5000
"""Rows one sweep statement deletes at most (~10 ms of lock): a longer backlog is cut in several."""
SWEEP_BUSY_MS = 100
"""How long a sweep waits for another process's lock: it is retried at the next interval, not queued."""
JOURNAL_SIZE_LIMIT = 4 << 20
"""Bytes a checkpointed WAL is truncated to (SQLite's default keeps it at its high-water mark)."""
PROBE_BYTES = 32 << 10
"""What ``ping`` writes: more than a typical event's notifications, so that a disk with room for a tiny row
but not for an event is not called ready (measured on a full 2 MiB tmpfs: a 1.5 KiB append failed while a
one-row probe still passed)."""
VACUUM_STEP = 1024
"""Pages one incremental vacuum step frees (~80 ms of write lock on this machine: 2048 took 165 ms)."""
VACUUM_MIN_FREE_PAGES = 256
"""Free pages (1 MiB at 4 KiB pages) from which a sweep gives pages back to the file system."""


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
        busy_timeout: float = DEFAULT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        retention: Retention | None = None,
        sweep_interval: float = SWEEP_INTERVAL,
    ) -> None:
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}")
        self.path = Path(path)
        self.synchronous = synchronous
        self.ack_wait = ack_wait
        self.timeout = timeout
        self.retention = retention
        self.sweep_interval = sweep_interval
        self._busy_timeout = busy_timeout
        self._clock = clock or SystemClock()
        self._writer: _Writer | None = None
        self._token_prefix = uuid.uuid4().hex[:16]
        self._tokens = itertools.count(1)

    def _now(self) -> float:
        return self._clock.now().timestamp()

    async def _run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        own: bool = False,
        timeout: float | None = None,
        single: bool = False,
        early: bool = False,
    ) -> T:
        writer = self._writer
        if writer is None:
            raise StoreError("sqlite store is not started")
        if not writer.alive:
            raise StoreError(f"sqlite store {self.path.name}: its writer thread is not running")
        wait = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        call = _Call(fn, future, loop, time.monotonic() + wait, own=own, single=single, early=early)
        # a timer rather than asyncio.wait/wait_for, one for the calls of a turn of the loop (_Writer.submit),
        # and a cancelled caller (client gone) does not abandon its call (the emitter's retry then finds it
        # stored, as before).
        writer.submit(call, wait)
        try:
            return await future
        finally:
            if call.timer is not None:
                call.timer.cancel()

    def _expire_all(self, writer: _Writer, calls: list[weakref.ref[_Call]], wait: float) -> None:
        for ref in calls:  # weak: an answered call is gone with its payload, not kept for ``wait`` seconds
            call = ref()
            if call is not None and not call.future.done():
                self._expire(writer, call, wait, True)

    def _expire(self, writer: _Writer, call: _Call, wait: float, first: bool) -> None:
        if call.future.done():
            return
        if writer.abandon(call):  # never begun: it will not be
            call.future.set_exception(
                StoreError(
                    f"sqlite store {self.path.name}: no answer within {wait:g}s "
                    "(the file is locked by another process, the disk is full or stuck); nothing written"
                )
            )
        elif first:  # being executed: its outcome is one commit away
            call.timer = call.loop.call_later(wait, self._expire, writer, call, wait, False)
        else:
            call.future.set_exception(
                StoreError(f"sqlite store {self.path.name}: commit did not finish in time; outcome unknown")
            )

    async def start(self) -> None:
        if self._writer is not None:
            return
        writer = _Writer(
            self.path,
            self.synchronous,
            self._busy_timeout,
            self._expire_all,
            sweeper=_Sweeper(self.retention, self._now) if self.retention is not None else None,
            sweep_interval=self.sweep_interval,
        )
        await writer.start()
        self._writer = writer

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.close(2 * self.timeout + 1.0)

    async def ping(self) -> None:
        """``PROBE_BYTES`` written and committed through the writer thread: the file can take an event's
        notifications now (not locked by another process, room on the disk, the thread alive)."""
        now = self._now()
        await self._run(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO probe (id, at, room) VALUES (1, ?, zeroblob(?))", (now, PROBE_BYTES)
            ),
            single=True,
        )

    async def sweep(self, timeout: float = 60.0) -> dict[str, int]:
        """Run the retention sweep now (the writer thread also runs it every ``sweep_interval``): rows
        deleted per kind (``seen``, ``kv``, ``dead_letters_age``, ``dead_letters_size``)."""
        writer = self._writer
        if writer is None or writer.sweeper is None:
            raise StoreError("sqlite store: not started, or opened without retention")
        return await self._run(writer.maintain, own=True, timeout=timeout)

    # ---- outbox ------------------------------------------------------------------------------------
    async def append(self, items: Sequence[NewItem]) -> None:
        if not items:
            return
        now = self._now()
        if len(items) == 1:  # one statement: no savepoint (the common event: one Alert, one Provider)
            i = items[0]
            row = (i.id, i.provider, i.payload, now, now)
            await self._run(lambda c: c.execute(_APPEND, row), single=True)
            return
        rows = [(i.id, i.provider, i.payload, now, now) for i in items]
        await self._run(lambda c: c.executemany(_APPEND, rows))

    async def append_held(self, items: Sequence[NewItem], hold: Sequence[bool]) -> list[Lease]:
        """``append``, with the items marked in ``hold`` leased to the caller in the same transaction
        (``attempts`` 1, a lease of ``ack_wait``): what a worker of this process will deliver at once
        needs no ``lease`` of its own (a round trip to the writer thread and the payload read back and
        decoded). Their ``Lease`` is returned once committed, an id already in the outbox excepted (it
        is not ours to deliver). After a crash a held item waits out its lease, as one in delivery."""
        if not items:
            return []
        now = self._now()
        until = now + self.ack_wait
        rows: list[tuple[str, str, bytes, float, float, int, float, str]] = []
        leases: list[Lease] = []
        for item, held in zip(items, hold, strict=True):
            if held:
                token = self._token()
                rows.append((item.id, item.provider, item.payload, now, now, 1, until, token))
                leases.append(Lease(item.id, item.provider, item.payload, 1, now, token))
            else:
                rows.append((item.id, item.provider, item.payload, now, now, 0, 0.0, ""))

        def insert(c: sqlite3.Connection) -> list[Lease]:
            before = c.total_changes
            if len(rows) == 1:
                c.execute(_APPEND_HELD, rows[0])
            else:
                c.executemany(_APPEND_HELD, rows)
            if c.total_changes - before == len(rows):
                return leases
            return [  # some ids were there already: only the rows written now are ours
                lease
                for lease in leases
                if c.execute(
                    "SELECT 1 FROM outbox WHERE id = ? AND lease_token = ?", (lease.id, lease.token)
                ).fetchone()
            ]

        return await self._run(insert, single=len(rows) == 1)

    def _token(self) -> str:
        """A lease token unique across processes: this store's random prefix and a counter (uuid4 read
        ``os.urandom`` for every lease)."""
        return f"{self._token_prefix}{next(self._tokens)}"

    async def lease(self, provider: str) -> Lease | None:
        now = self._now()
        token = self._token()

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

        return await self._run(pick, single=True)

    async def lease_many(self, provider: str, limit: int) -> list[Lease]:
        """Up to ``limit`` due items of ``provider``'s lane, oldest first, leased in one statement (one
        round trip to the writer thread for a worker batch, instead of one each)."""
        if limit <= 1:
            one = await self.lease(provider)
            return [one] if one is not None else []
        now = self._now()
        token = self._token()  # one for the batch: a settle matches id and token

        def pick(c: sqlite3.Connection) -> list[Lease]:
            rows = c.execute(
                "UPDATE outbox SET attempts = attempts + 1, lease_until = ?, lease_token = ? WHERE seq IN ("
                " SELECT seq FROM outbox WHERE provider = ? AND due_at <= ? AND lease_until <= ?"
                " ORDER BY due_at, seq LIMIT ?)"
                " RETURNING due_at, seq, id, provider, payload, attempts, enqueued_at",
                (now + self.ack_wait, token, provider, now, now, limit),
            ).fetchall()
            rows.sort(key=lambda r: (r[0], r[1]))  # RETURNING has no order of its own
            return [Lease(r[2], r[3], bytes(r[4]), int(r[5]), float(r[6]), token) for r in rows]

        return await self._run(pick, single=True)

    async def ack_many(self, leases: Sequence[Lease]) -> None:
        """``ack`` for each, in one call (the runner gathers the acks that arrive while one is stored)."""
        if not leases:
            return
        rows = [(lease.id, lease.token) for lease in leases]
        if len(rows) == 1:
            await self._run(lambda c: c.execute(_ACK, rows[0]), single=True, early=True)
        else:
            await self._run(lambda c: c.executemany(_ACK, rows), early=True)

    async def ack(self, lease: Lease) -> None:
        await self._run(
            lambda c: c.execute(
                "DELETE FROM outbox WHERE id = ? AND lease_token = ?", (lease.id, lease.token)
            ),
            single=True,
            early=True,
        )

    async def nack(self, lease: Lease, *, delay: float) -> None:
        due = self._now() + max(0.0, delay)
        await self._run(
            lambda c: c.execute(
                "UPDATE outbox SET due_at = ?, lease_until = 0, lease_token = '' WHERE id = ? AND lease_token = ?",
                (due, lease.id, lease.token),
            ),
            single=True,
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
            ).fetchall(),
            single=True,
            early=True,
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
            # Expired keys nobody takes over are deleted by the retention sweep.
            changed = c.execute(
                "INSERT INTO seen (key, expires_at) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at WHERE seen.expires_at <= ?",
                (key, now + ttl, now),
            ).rowcount
            return changed == 0

        return await self._run(check, single=True, early=True)

    async def forget(self, key: str, ttl: float) -> None:
        await self._run(lambda c: c.execute("DELETE FROM seen WHERE key = ?", (key,)), single=True)

    async def kv_get(self, key: str) -> KVEntry | None:
        now = self._now()
        row = await self._run(
            lambda c: c.execute(
                "SELECT value, revision FROM kv WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
                (key, now),
            ).fetchone(),
            single=True,
            early=True,
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


def _once_more_on_misuse(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn``, tried a second time (inside its savepoint, rolled back first) when the sqlite3 module reports
    SQLITE_MISUSE ("bad parameter or other API misuse", ``InterfaceError``): CPython's sqlite3 raised it now
    and then for an ``executemany`` that succeeds when repeated (about one run in five of
    tests/adversarial/test_noise_state.py's SQLite test, 1,200 events; coverage.py retries it the same way).
    A 503 for it cost more than the retry: noise state written earlier in the admission made the emitter's
    retry look like a repeat. A second misuse is an error like any other."""
    try:
        return fn(conn)
    except sqlite3.InterfaceError:
        conn.execute("ROLLBACK TO call")
        return fn(conn)


_STOP = object()
MAX_BATCH = 512
_QUEUED, _CLAIMED, _ABANDONED = 0, 1, 2


class _Call:
    """One call queued for the writer thread; ``state`` is changed under ``_Writer.claims`` only."""

    __slots__ = (
        "__weakref__",
        "deadline",
        "early",
        "fn",
        "future",
        "loop",
        "own",
        "single",
        "state",
        "timer",
    )

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], Any],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        *,
        own: bool = False,
        single: bool = False,
        early: bool = False,
    ) -> None:
        self.fn = fn
        self.future = future
        self.loop = loop
        self.deadline = deadline
        self.own = own
        """Runs outside the batch's transaction, managing its own (the retention sweep)."""
        self.single = single
        """One SQL statement: atomic by itself (SQLite rolls a failed statement back), so it runs without a
        savepoint of its own (two statements fewer per call)."""
        self.early = early
        """Answered once executed, before the batch's commit: nothing the caller does next depends on it
        being on disk (a lease, an ack, the duplicate window, a read); see ``_Writer._commit``."""
        self.state = _QUEUED
        self.timer: asyncio.TimerHandle | None = None


_OVER_CAP = (
    "SELECT seq FROM (SELECT seq, SUM(length(payload) + length(error) + length(id) + length(provider)"
    " + length(reason)) OVER (ORDER BY seq DESC) AS total FROM dead_letters)"
    " WHERE total > ? ORDER BY seq DESC LIMIT 1"
)


@dataclass(frozen=True)
class _Sweeper:
    """What one retention sweep deletes (see the module docstring). Runs on the writer thread."""

    retention: Retention
    now: Callable[[], float]

    def delete_chunk(self, c: sqlite3.Connection) -> tuple[dict[str, int], bool]:
        """At most ``SWEEP_CHUNK`` rows of each kind; the second value says whether more are due."""
        now = self.now()
        counts = {
            "seen": c.execute(
                "DELETE FROM seen WHERE key IN (SELECT key FROM seen WHERE expires_at <= ? LIMIT ?)",
                (now, SWEEP_CHUNK),
            ).rowcount,
            "kv": c.execute(
                "DELETE FROM kv WHERE key IN"
                " (SELECT key FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?)",
                (now, SWEEP_CHUNK),
            ).rowcount,
            "dead_letters_age": c.execute(
                "DELETE FROM dead_letters WHERE seq IN (SELECT seq FROM dead_letters WHERE dead_at <= ? LIMIT ?)",
                (now - self.retention.dead_letter_max_age, SWEEP_CHUNK),
            ).rowcount,
            "dead_letters_size": 0,
        }
        if self.retention.dead_letter_max_bytes > 0:
            row = c.execute(_OVER_CAP, (self.retention.dead_letter_max_bytes,)).fetchone()
            if row is not None:  # row[0]: the newest dead letter that does not fit; it and older ones go
                counts["dead_letters_size"] = c.execute(
                    "DELETE FROM dead_letters WHERE seq IN"
                    " (SELECT seq FROM dead_letters WHERE seq <= ? ORDER BY seq LIMIT ?)",
                    (row[0], SWEEP_CHUNK),
                ).rowcount
        return counts, any(n >= SWEEP_CHUNK for n in counts.values())


def _reclaim(c: sqlite3.Connection) -> int:
    """Give up to ``VACUUM_STEP`` free pages back to the file system (auto_vacuum=INCREMENTAL), in its own
    transaction: ``executescript`` steps the pragma to the end (``execute`` frees one page per call, even
    with ``fetchall``; measured). Returns how many pages were free before."""
    free = int(c.execute("PRAGMA freelist_count").fetchone()[0])
    if free < VACUUM_MIN_FREE_PAGES or int(c.execute("PRAGMA auto_vacuum").fetchone()[0]) != 2:
        return 0
    c.executescript(f"PRAGMA incremental_vacuum({VACUUM_STEP})")
    return free


def _private(path: Path) -> None:
    """Create the file 0600, or tighten an existing one (and its WAL/SHM), before SQLite opens it: SQLite
    creates ``-wal`` and ``-shm`` with the database file's permissions."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            try:
                os.fchmod(fd, 0o600)
            except PermissionError:  # not ours (a volume prepared by someone else): leave it, say so
                log.warning("sqlite store %s: cannot make the file private (0600): not its owner", path.name)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(OSError):
            side = path.with_name(path.name + suffix)
            if side.stat().st_mode & 0o077:
                side.chmod(0o600)


class _Writer:
    """The thread that owns the connection and group-commits queued calls (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        synchronous: str,
        busy_timeout: float,
        on_expire: Callable[[_Writer, list[weakref.ref[_Call]], float], None],
        *,
        sweeper: _Sweeper | None = None,
        sweep_interval: float = SWEEP_INTERVAL,
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.sweeper = sweeper
        self.sweep_interval = sweep_interval
        self.claims = threading.Lock()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: list[_Call] = []  # submitted during this turn of the event loop
        self._waits: dict[float, list[weakref.ref[_Call]]] = {}  # the same, by how long they may wait
        self.on_expire = on_expire
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        self._busy_ms = -1
        self._failing_since: float | None = None
        self._stop_seen = False
        self._sweeping = False

        self.alive = False
        """Whether the thread runs: set before it starts, cleared as it ends, whatever ends it. Read by every
        call (``SQLiteStore._run``), so a flag, not ``Thread.is_alive()`` (a lock round trip each time)."""

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(
            target=self._life, args=(opened, loop), name="state-sqlite", daemon=True
        )
        self.alive = True
        try:
            self._thread.start()
        except BaseException:
            self.alive = False
            raise
        await opened

    def _life(self, opened: asyncio.Future[None], loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._main(opened, loop)
        finally:
            self.alive = False

    def submit(self, call: _Call, wait: float) -> None:
        """Queue ``call``: the calls made during one turn of the event loop reach the thread together (one
        queue item, one wake-up of the thread) at the end of the turn, no timer; their deadlines share one
        timer per length of wait (``on_expire`` abandons or fails those still unanswered)."""
        pending = self._pending
        pending.append(call)
        if len(pending) == 1:
            call.loop.call_soon(self._flush)
        self._waits.setdefault(wait, []).append(weakref.ref(call))

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        waits, self._waits = self._waits, {}
        if batch:
            self._queue.put(batch)
            loop = batch[0].loop
            for wait, calls in waits.items():
                loop.call_later(wait, self.on_expire, self, calls, wait)

    def abandon(self, call: _Call) -> bool:
        """The caller gives up: True if the thread had not begun the call (it never will)."""
        with self.claims:
            if call.state == _QUEUED:
                call.state = _ABANDONED
            return call.state == _ABANDONED

    def _claim(self, call: _Call) -> bool:
        with self.claims:
            if call.state == _QUEUED:
                call.state = _CLAIMED
                return True
            return False

    async def close(self, timeout: float) -> None:
        self._flush()
        self._queue.put(_STOP)
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, timeout)
            if thread.is_alive():  # stuck in a system call on a dead volume: a daemon thread, left behind
                log.warning(
                    "sqlite store %s: writer thread still busy after %gs; not waiting",
                    self.path.name,
                    timeout,
                )

    # ---- the connection ------------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        try:
            _private(self.path)
        except OSError as exc:
            raise StoreError(
                f"sqlite store {self.path.name} cannot be opened: {exc.strerror or exc}"
            ) from exc
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        try:
            self._busy_ms = int(self.busy_timeout * 1000)
            new = int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0
            if new:
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only possible before the first table
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"sqlite store {self.path.name} has schema version {version}, "
                    f"newer than this controller's {SCHEMA_VERSION}"
                )
            conn.executescript(
                "BEGIN IMMEDIATE;" + _SCHEMA + f"PRAGMA user_version={SCHEMA_VERSION}; COMMIT;"
            )
            if self.sweeper is not None and int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) != 2:
                self._convert(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _convert(self, conn: sqlite3.Connection) -> None:
        """A file created before auto_vacuum=INCREMENTAL: one VACUUM makes it so (once, at open)."""
        started = time.monotonic()
        try:
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("VACUUM")
        except sqlite3.Error as exc:  # e.g. not enough disk for the copy: sweep anyway, without shrinking
            log.warning("sqlite store %s: cannot switch to incremental vacuum: %s", self.path.name, exc)
            return
        log.info(
            "sqlite store %s: switched to incremental vacuum in %.2fs",
            self.path.name,
            time.monotonic() - started,
        )

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()  # after a connection was given up (see _rollback)
        return self._conn

    def _busy(self, conn: sqlite3.Connection, seconds: float) -> None:
        ms = max(0, int(min(self.busy_timeout, seconds) * 20)) * 50  # 50 ms steps: rarely re-set
        if ms != self._busy_ms:
            conn.execute(f"PRAGMA busy_timeout={ms}")
            self._busy_ms = ms

    def _rollback(self) -> None:
        conn = self._conn
        if conn is None or not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except Exception:  # the connection is unusable: a new one for the next batch
            with contextlib.suppress(Exception):
                conn.close()
            self._conn = None

    # ---- the thread ----------------------------------------------------------------------------------
    def _main(self, opened: asyncio.Future[None], loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._conn = self._open()
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, StoreError)
                else StoreError(f"sqlite store {self.path.name} cannot be opened: {exc}")
            )
            loop.call_soon_threadsafe(_settle, opened, None, error)
            return
        loop.call_soon_threadsafe(_settle, opened, None, None)
        sweep_at = time.monotonic()  # a first sweep at once: a restart after a flood cleans up
        try:
            while not self._stop_seen:
                if self.sweeper is not None and time.monotonic() >= sweep_at:
                    self._sweep()
                    sweep_at = time.monotonic() + self.sweep_interval
                    continue
                wait = None if self.sweeper is None else max(0.0, sweep_at - time.monotonic())
                try:
                    first = self._queue.get(timeout=wait)
                except queue.Empty:
                    continue
                if first is _STOP:
                    return
                self._serve(first)
        finally:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()

    def _serve(self, first: _Call | list[_Call]) -> None:
        """Run ``first`` and every call queued behind it (up to ``MAX_BATCH``) as one batch."""
        batch = list(first) if isinstance(first, list) else [first]
        while len(batch) < MAX_BATCH:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                self._stop_seen = True
                break
            if isinstance(item, list):
                batch.extend(item)
            else:
                batch.append(item)
        try:
            self._run_batch(batch)
        except Exception as exc:  # a bug in here must not end the thread: fail the batch, go on
            log.error("sqlite store %s: batch failed unexpectedly: %r", self.path.name, exc)
            self._rollback()
            for call in batch:
                self._settle(call, None, StoreError(f"sqlite store {self.path.name}: internal error"))

    def _serve_pending(self) -> None:
        """Between two chunks of a sweep: store what was queued meanwhile."""
        if self._stop_seen:
            return
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            return
        if item is _STOP:
            self._stop_seen = True
            return
        self._serve(item)

    def _run_batch(self, batch: list[_Call]) -> None:
        now = time.monotonic()
        live: list[_Call] = []
        for call in batch:
            if call.deadline <= now and self.abandon(call):  # its caller is about to give up: do not begin
                self._settle(
                    call,
                    None,
                    StoreError(f"sqlite store {self.path.name}: no answer in time; nothing written"),
                )
            elif call.state == _QUEUED:  # not abandoned by its caller already
                live.append(call)
        plain = [call for call in live if not call.own]
        if plain:
            self._commit(plain)
        for call in live:
            if call.own and self._sweeping:  # asked for during a sweep's pause: after it, not inside it
                self._queue.put(call)
            elif call.own:
                self._own(call)

    def _commit(self, calls: list[_Call]) -> None:
        results: list[tuple[_Call, Any, BaseException | None]] = []
        answered: set[int] = set()
        try:
            conn = self._connection()
            self._busy(conn, min(call.deadline for call in calls) - time.monotonic())
            conn.execute("BEGIN IMMEDIATE")
            for call in calls:
                if not self._claim(call):  # abandoned while the thread waited for the lock
                    continue
                if call.single:
                    try:
                        value = call.fn(conn)
                    except sqlite3.InterfaceError:  # see _once_more_on_misuse: nothing was changed
                        try:
                            value = call.fn(conn)
                        except Exception as exc:
                            if not conn.in_transaction:
                                raise
                            results.append((call, None, self._error(exc)))
                            continue
                    except Exception as exc:  # the statement rolled itself back; the batch goes on
                        if not conn.in_transaction:  # SQLITE_FULL/IOERR may end the transaction: all fail
                            raise
                        results.append((call, None, self._error(exc)))
                        continue
                    results.append((call, value, None))
                    continue
                conn.execute("SAVEPOINT call")
                try:
                    value = _once_more_on_misuse(conn, call.fn)
                except Exception as exc:  # this call only: the others of the batch go on
                    conn.execute("ROLLBACK TO call")
                    conn.execute("RELEASE call")
                    results.append((call, None, self._error(exc)))
                    continue
                conn.execute("RELEASE call")
                results.append((call, value, None))
            early = [result for result in results if result[0].early]
            if early:  # answered now, while the commit (the fsync) runs
                self._settle_all(early)
                answered = {id(result[0]) for result in early}
                results = [result for result in results if not result[0].early]
            conn.execute("COMMIT")
        except (
            Exception
        ) as exc:  # BEGIN or COMMIT failed (locked, disk full, I/O): nothing of the batch holds
            self._rollback()
            self._failed(exc)
            failure = self._error(exc)
            results = [(call, None, failure) for call in calls if id(call) not in answered]
        else:
            self._succeeded()
        self._settle_all(results)

    def _own(self, call: _Call) -> None:
        if not self._claim(call):
            return
        try:
            value = call.fn(self._connection())
        except Exception as exc:
            self._rollback()
            self._settle(call, None, self._error(exc))
        else:
            self._settle(call, value, None)

    def _error(self, exc: Exception) -> Exception:
        if isinstance(exc, StoreError) or not isinstance(exc, sqlite3.Error):
            return exc
        return StoreError(f"sqlite store {self.path.name}: {exc}")

    def _failed(self, exc: Exception) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning(
                "sqlite store %s: writes failing (events are refused with 503): %s", self.path.name, exc
            )

    def _succeeded(self) -> None:
        if self._failing_since is not None:
            log.info(
                "sqlite store %s: writes succeed again after %.1fs",
                self.path.name,
                time.monotonic() - self._failing_since,
            )
            self._failing_since = None

    @staticmethod
    def _settle(call: _Call, value: Any, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            call.loop.call_soon_threadsafe(_settle, call.future, value, error)

    @staticmethod
    def _settle_all(results: list[tuple[_Call, Any, BaseException | None]]) -> None:
        """Hand a batch's results back with one ``call_soon_threadsafe`` per event loop (one wake-up of the
        loop, one write to its self-pipe) instead of one per call."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]]
        by_loop = {}
        for call, value, error in results:
            by_loop.setdefault(call.loop, []).append((call.future, value, error))
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle_many, settled)

    # ---- retention -----------------------------------------------------------------------------------
    def _transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._connection()
        self._busy(conn, SWEEP_BUSY_MS / 1000)
        conn.execute("BEGIN IMMEDIATE")
        try:
            value = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return value

    def maintain(self, conn: sqlite3.Connection | None = None) -> dict[str, int]:
        """Delete what retention says is gone, chunk by chunk (queued calls are served in between), then
        give the freed pages back to the file system. Rows deleted per kind. (``conn``: called as a
        store call; it manages its own transactions on the writer's connection.)"""
        assert self.sweeper is not None
        del conn
        self._sweeping = True
        try:
            return self._maintain()
        finally:
            self._sweeping = False

    def _maintain(self) -> dict[str, int]:
        assert self.sweeper is not None
        deleted: dict[str, int] = {}
        while True:
            counts, more = self._transaction(self.sweeper.delete_chunk)
            for kind, n in counts.items():
                deleted[kind] = deleted.get(kind, 0) + n
            if not more:
                break
            self._serve_pending()
        reclaimed = 0
        for _ in range(128):  # at most 128 Ki pages (512 MiB) a sweep; the rest at the next one
            conn = self._connection()
            self._busy(conn, SWEEP_BUSY_MS / 1000)
            pages = _reclaim(conn)
            if not pages:
                break
            reclaimed += min(pages, VACUUM_STEP)
            if pages <= VACUUM_STEP:
                break
            self._serve_pending()
        if reclaimed:
            self._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return deleted

    def _sweep(self) -> None:
        assert self.sweeper is not None
        try:
            deleted = self.maintain()
        except Exception as exc:  # locked or full: tried again at the next interval
            self._rollback()
            log.warning("sqlite store %s: retention sweep failed: %s", self.path.name, exc)
            return
        retention = self.sweeper.retention
        if deleted["dead_letters_age"]:
            log.info(
                "sqlite store %s: deleted %d dead letters older than %gs (--store-dead-letter-max-age)",
                self.path.name,
                deleted["dead_letters_age"],
                retention.dead_letter_max_age,
            )
        if deleted["dead_letters_size"]:
            log.info(
                "sqlite store %s: deleted the %d oldest dead letters beyond %d bytes (--store-dead-letter-max-bytes)",
                self.path.name,
                deleted["dead_letters_size"],
                retention.dead_letter_max_bytes,
            )


def _settle_many(settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, value, error in settled:
        _settle(future, value, error)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled, or gave up
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)

"""The ``sqlite:`` store under attack from its own host (issue 23 items 4, 9, 16): a real controller process.

* Another process holds the file's write lock (``BEGIN EXCLUSIVE``, as a ``sqlite3`` shell would) for 8 s
  while events arrive: every POST is answered (503 while locked) within a bound, ``/readyz`` is 503 while
  the store cannot be written, and once the lock is gone the same process takes and delivers events again.
  Before the fix the first failed ``BEGIN`` killed the writer thread: every later POST hung for ever and
  ``/readyz`` stayed 200.
* A full disk (a 2 MiB tmpfs): 503 within the bound, never a hang; readiness 503; room again → recovery.
* SIGTERM while the lock is held: the process exits within the pod's grace period.
* Retention: a file flooded with dead letters (old ones, and more bytes than the cap) is cut to the cap and
  the file shrinks, by the controller itself.
* The file and its WAL/SHM are 0600; events naming objects with control characters are a 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from notification_controller.store.sqlite import SQLiteStore
from tests.support.controllers import ControllerProcess, FlakySink, event, manifests

pytestmark = pytest.mark.slow

FAST = ["--delivery-retry-base=50ms", "--delivery-retry-cap=300ms", "--store-ack-wait=2s"]
ANSWER_BOUND = 9.0
"""Seconds any POST may take while the store is locked or full: the store's 5 s deadline plus slack for
a loaded two-core machine. Before the fix: no answer at all (the client's own timeout fires)."""
CLIENT_TIMEOUT = 20.0

HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


def controller(tmp: Path, sink: FlakySink, db: Path, *extra: str) -> ControllerProcess:
    return ControllerProcess(
        manifests(tmp / "manifests", sink.url),
        [f"--store=sqlite:{db}", *FAST, *extra],
        log_path=tmp / "controller.log",
    )


@contextlib.asynccontextmanager
async def lock_held(db: Path, seconds: float) -> AsyncIterator[asyncio.subprocess.Process]:
    """A second process holding ``BEGIN EXCLUSIVE`` on ``db`` for ``seconds`` (killed on the way out)."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD_LOCK, str(db), str(seconds), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        async with asyncio.timeout(15):
            assert await holder.stdout.readline() == b"locked\n"
        yield holder
    finally:
        if holder.returncode is None:
            holder.kill()
        await holder.wait()


async def timed_post(session: aiohttp.ClientSession, url: str, name: str) -> tuple[int, float]:
    """(status, seconds); status 0 when no answer came within ``CLIENT_TIMEOUT``, -1 when the connection
    was closed without one."""
    started = time.monotonic()
    try:
        async with session.post(
            url, json=event(name), timeout=aiohttp.ClientTimeout(total=CLIENT_TIMEOUT)
        ) as r:
            await r.read()
            return r.status, time.monotonic() - started
    except TimeoutError:
        return 0, time.monotonic() - started
    except aiohttp.ClientError:
        return -1, time.monotonic() - started


async def ready_status(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
        return r.status


async def wait_ready_status(session: aiohttp.ClientSession, url: str, want: int, timeout: float) -> float:
    """Poll ``/readyz`` until it answers ``want``; seconds it took."""
    started = time.monotonic()
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            if await ready_status(session, url) == want:
                return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"/readyz never answered {want} within {timeout}s")
        await asyncio.sleep(0.1)


async def test_a_lock_held_by_another_process_is_503_within_a_bound_then_the_controller_recovers(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state.db"
    async with FlakySink() as sink, aiohttp.ClientSession() as session:
        proc = controller(tmp_path, sink, db)
        await proc.start()
        try:
            assert (await timed_post(session, proc.events_url, "before"))[0] == 202
            await sink.wait_unique(1, timeout=20)
            async with lock_held(db, 8.0) as holder:
                first = await asyncio.gather(
                    *(timed_post(session, proc.events_url, f"locked-{i}") for i in range(6))
                )
                assert await ready_status(session, proc.ready_url) == 503  # the store cannot be written
                second = [await timed_post(session, proc.events_url, f"late-{i}") for i in range(2)]
                await holder.wait()
            answers = first + second
            assert all(status in (202, 503) for status, _ in answers), answers  # 0: hung (before the fix)
            assert max(seconds for _, seconds in answers) < ANSWER_BOUND, answers
            assert [status for status, _ in first].count(503) == 6, first  # locked throughout: refused
            # the lock is gone: the same process recovers (its writer thread is alive) and delivers
            await wait_ready_status(session, proc.ready_url, 200, timeout=15)
            after = [await timed_post(session, proc.events_url, f"after-{i}") for i in range(5)]
            assert [status for status, _ in after] == [202] * 5, after
            accepted = 1 + 5 + [status for status, _ in second].count(202)
            await sink.wait_unique(accepted, timeout=30)
            assert sink.unique == accepted  # every 202 delivered; no 503 was stored behind the caller's back
        finally:
            assert await proc.stop() == 0, proc.log()


def _mount_tmpfs(directory: Path, size: str) -> None:
    directory.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root / CAP_SYS_ADMIN): {done.stderr.strip()}")


async def test_a_full_disk_is_503_within_a_bound_and_unready_then_recovers(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "2m")
    try:
        db = disk / "state.db"
        async with FlakySink() as sink, aiohttp.ClientSession() as session:
            proc = controller(tmp_path, sink, db)
            await proc.start()
            try:
                filler = disk / "filler"
                with contextlib.suppress(OSError), open(filler, "wb") as f:  # ENOSPC ends it
                    for _ in range(4096):
                        f.write(b"\0" * 4096)
                        f.flush()
                # the WAL has some room left: events fill it, then every answer is a prompt 503
                answers = []
                for i in range(400):
                    answers.append(await timed_post(session, proc.events_url, f"full-{i}"))
                    if answers[-1][0] != 202 and len(answers) >= 10 and answers[-3][0] == answers[-1][0]:
                        break
                statuses = [status for status, _ in answers]
                assert 503 in statuses and 0 not in statuses, statuses
                assert max(seconds for _, seconds in answers) < ANSWER_BOUND, answers
                assert await ready_status(session, proc.ready_url) == 503
                filler.unlink()  # room again
                await wait_ready_status(session, proc.ready_url, 200, timeout=15)
                status, _ = await timed_post(session, proc.events_url, "room-again")
                assert status == 202
                await sink.wait_unique(statuses.count(202) + 1, timeout=30)
            finally:
                assert await proc.stop() == 0, proc.log()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


async def test_an_append_whose_commit_fails_is_not_answered_as_stored(tmp_path: Path) -> None:
    """Group commit answers claims and acks before the commit, appends only after it: on a full disk the
    statements of a batch succeed in memory and its COMMIT fails (the WAL cannot grow), so an append
    answered with the others would be a 202 for nothing stored. Both appends (plain and handed to a
    worker) must raise, and nothing of them may be in the file once there is room again."""
    from notification_controller.errors import StoreError
    from notification_controller.store.base import NewItem

    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "2m")
    try:
        store = SQLiteStore(disk / "state.db", timeout=2.0)
        await store.start()
        filler = disk / "filler"
        try:
            with contextlib.suppress(OSError), open(filler, "wb") as f:  # ENOSPC ends it
                for _ in range(4096):
                    f.write(b"\0" * 4096)
                    f.flush()
            big = b"x" * (256 << 10)  # more than the WAL may still hold
            claimed = asyncio.create_task(store.seen("k", 60))  # in the same batch: answered early
            with pytest.raises(StoreError):
                await store.append([NewItem("plain", "ns/p", big)])
            assert await claimed is False
            with pytest.raises(StoreError):
                await store.append_held([NewItem("held", "ns/p", big)], [True])
            filler.unlink()  # room again
            assert await store.lease("ns/p") is None  # neither was stored
            assert await store.stats() == {}
        finally:
            await store.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


async def test_sigterm_with_a_locked_store_exits_within_the_grace_period(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    async with FlakySink() as sink, aiohttp.ClientSession() as session:
        proc = controller(tmp_path, sink, db)
        await proc.start()
        async with lock_held(db, 120.0):
            posts = [asyncio.create_task(timed_post(session, proc.events_url, f"e{i}")) for i in range(4)]
            await asyncio.sleep(1.0)  # the POSTs are waiting on the store
            started = time.monotonic()
            assert proc.proc is not None
            proc.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(40):
                code = await proc.proc.wait()
            took = time.monotonic() - started
            answers = await asyncio.gather(*posts)
        assert code == 0, proc.log()
        assert took < 30.0, f"SIGTERM took {took:.1f}s, over the pod's 30 s grace period"
        # the POSTs waiting on the store were answered (503: the emitter retries elsewhere), not cut off
        assert [status for status, _ in answers] == [503] * 4, answers


async def _flood_dead_letters(db: Path, old: int, recent: int, size: int) -> None:
    """``old`` dead letters that died 30 days ago and ``recent`` ones that died now, ``size`` bytes each,
    written as the store writes them (straight SQL: 20,000 through the API would take minutes)."""
    store = SQLiteStore(db)  # creates the schema
    await store.start()
    await store.close()
    now = time.time()
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.executemany(
            "INSERT INTO dead_letters (id, provider, payload, attempts, enqueued_at, dead_at, reason, error)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (
                (
                    f"dl-{i}",
                    "flux-system/sink",
                    os.urandom(size // 2).hex().encode(),
                    5,
                    now - 3600,
                    now - 30 * 86400 if i < old else now,
                    "max-age",
                    "503 Service Unavailable",
                )
                for i in range(old + recent)
            ),
        )


def _dead_letter_bytes(db: Path) -> tuple[int, int]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        count, size = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(length(payload) + length(error) + length(id) + length(provider)"
            " + length(reason)), 0) FROM dead_letters"
        ).fetchone()
    return int(count), int(size)


async def test_a_dead_letter_flood_is_cut_to_the_age_and_size_caps_and_the_file_shrinks(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state.db"
    await _flood_dead_letters(db, old=5000, recent=15000, size=2400)  # ~48 MB, as in the issue
    before = db.stat().st_size
    assert before > 40 << 20
    cap = 1 << 20
    async with FlakySink() as sink:
        proc = controller(tmp_path, sink, db, f"--store-dead-letter-max-bytes={cap}")
        await proc.start()
        try:
            wal = db.with_name(db.name + "-wal")
            deadline = time.monotonic() + 60
            while True:  # the controller sweeps at open: no old one left, the rest under the cap, pages freed
                count, size = _dead_letter_bytes(db)
                on_disk = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
                if (size <= cap and on_disk < 8 << 20) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert size <= cap and 0 < count < 500, (count, size)
            with contextlib.closing(sqlite3.connect(db)) as conn:
                oldest = conn.execute("SELECT MIN(dead_at) FROM dead_letters").fetchone()[0]
            assert oldest > time.time() - 3600  # what is kept is recent (the 30-day-old ones went first)
        finally:
            assert await proc.stop() == 0, proc.log()
    assert on_disk < 8 << 20, (before, on_disk)  # 83 MB (48 MB of dead letters) → a few MB


async def test_the_file_and_its_wal_are_private(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    loose = tmp_path / "loose.db"
    loose.touch(mode=0o644)  # a file from an older version (or a lax umask)
    os.chmod(loose, 0o644)
    async with FlakySink() as sink, aiohttp.ClientSession() as session:
        for path in (db, loose):
            proc = controller(tmp_path, sink, path)
            await proc.start()
            try:
                assert (await timed_post(session, proc.events_url, path.stem))[0] == 202  # WAL/SHM exist now
                for name in (path.name, path.name + "-wal", path.name + "-shm"):
                    mode = (tmp_path / name).stat().st_mode & 0o777
                    assert mode == 0o600, (name, oct(mode))
            finally:
                assert await proc.stop() == 0, proc.log()


async def test_control_characters_in_object_names_are_refused_at_ingest(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    async with FlakySink() as sink, aiohttp.ClientSession() as session:
        proc = controller(tmp_path, sink, db)
        await proc.start()
        try:
            for field, value in (("name", "apps\x1b[2J"), ("namespace", "flux\x00"), ("kind", "K\x9bx")):
                body = event("apps")
                body["involvedObject"][field] = value
                async with session.post(proc.events_url, data=json.dumps(body).encode()) as resp:
                    text = await resp.text()
                assert resp.status == 400 and f"involvedObject.{field}: control characters" in text, text
            assert (await timed_post(session, proc.events_url, "apps-ünïcode"))[0] == 202  # letters are fine
        finally:
            assert await proc.stop() == 0, proc.log()

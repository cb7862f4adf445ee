"""The ``sqlite:PATH`` store on real files: what a 202 promised survives SIGKILL; leases outlive their
holder and expire; the schema is versioned; an unusable file is a ``StoreError``.

The writer runs in a child process (the real thing a kubelet SIGKILLs): it prints an id only after
``append`` returned (the moment the event server answers 202); the parent kills it mid-burst and a fresh
store on the same file must hold every printed id.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from notification_controller.errors import StoreError
from notification_controller.lib.clock import ManualClock
from notification_controller.store import NewItem
from notification_controller.store.sqlite import SCHEMA_VERSION, SQLiteStore

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from notification_controller.store import NewItem
    from notification_controller.store.sqlite import SQLiteStore

    async def main(path: str, mode: str) -> None:
        store = SQLiteStore(path, ack_wait=3600)
        await store.start()
        if mode == "lease":
            lease = await store.lease("ns/p")
            print(lease.id if lease else "none", flush=True)
            await asyncio.sleep(3600)
        n = 0
        while True:
            batch = [NewItem(f"ev{n}-{k}", f"ns/p{k}", b"x" * 512) for k in range(3)]
            await store.append(batch)
            print(n, flush=True)  # the 202
            n += 1

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def _child(path: Path, mode: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        str(path),
        mode,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def _kill(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    assert proc.returncode == -signal.SIGKILL


async def test_every_append_answered_before_sigkill_survives(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    proc = await _child(path, "append")
    assert proc.stdout is not None
    acknowledged: list[int] = []
    async with asyncio.timeout(60):
        while len(acknowledged) < 150:
            line = await proc.stdout.readline()
            assert line, "the writer died"
            acknowledged.append(int(line))
    await _kill(proc)  # mid-burst: it was appending the next batch
    acknowledged += [int(line) for line in (await proc.stdout.read()).split()]

    store = SQLiteStore(path)
    await store.start()
    try:
        stats = await store.stats()
        found: set[str] = set()
        for k in range(3):
            while (lease := await store.lease(f"ns/p{k}")) is not None:
                found.add(lease.id)
        expected = {f"ev{n}-{k}" for n in acknowledged for k in range(3)}
        assert expected <= found, f"lost after SIGKILL: {sorted(expected - found)[:5]}"
        # an event is one transaction: its notifications are all there or none is
        events = {i.split("-")[0] for i in found}
        assert found == {f"{e}-{k}" for e in events for k in range(3)}
        assert sum(s.depth for s in stats.values()) == len(found)
    finally:
        await store.close()


async def test_a_lease_held_by_a_killed_process_is_leased_again_after_its_deadline(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    setup = SQLiteStore(path)
    await setup.start()
    await setup.append([NewItem("only", "ns/p", b"payload")])
    await setup.close()

    proc = await _child(path, "lease")  # leases for an hour, then is SIGKILLed mid-delivery
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        assert (await proc.stdout.readline()).strip() == b"only"
    await _kill(proc)

    clock = ManualClock(datetime.now(UTC))
    store = SQLiteStore(path, clock=clock, ack_wait=30)
    await store.start()
    try:
        assert await store.lease("ns/p") is None, "still leased by the dead process until its deadline"
        clock.advance(3601)
        again = await store.lease("ns/p")
        assert again is not None and (again.id, again.payload, again.attempts) == ("only", b"payload", 2)
        clock.advance(31)  # our own lease expires too; a stale ack must not remove the new holder's item
        newest = await store.lease("ns/p")
        assert newest is not None and newest.attempts == 3
        await store.ack(again)
        assert (await store.stats())["ns/p"].depth == 1
        await store.ack(newest)
        assert await store.stats() == {}
    finally:
        await store.close()


async def test_wal_mode_and_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    await store.start()
    await store.start()  # idempotent
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    newer = SQLiteStore(path)
    with pytest.raises(StoreError, match="newer than this controller"):
        await newer.start()


async def test_an_unusable_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot be opened"):
        await SQLiteStore(tmp_path / "missing-dir" / "state.db").start()
    not_a_db = tmp_path / "garbage.db"
    not_a_db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError):
        await SQLiteStore(not_a_db).start()
    unstarted = SQLiteStore(tmp_path / "x.db")
    with pytest.raises(StoreError, match="not started"):
        await unstarted.ping()


IN_BATCH = textwrap.dedent(
    """
    import asyncio, sys, threading
    from notification_controller.store import NewItem
    from notification_controller.store.sqlite import SQLiteStore

    async def main(path: str) -> None:
        store = SQLiteStore(path, ack_wait=3600)
        await store.start()
        await store.append([NewItem("before", "ns/p", b"x")])
        print("202 before", flush=True)

        def hold(c: object) -> None:  # the last call of the batch: the transaction stays open
            print("in-batch", flush=True)
            threading.Event().wait()

        async def admit(name: str, items: list[NewItem]) -> None:
            await store.append(items)
            print("202", name, flush=True)

        async def window() -> None:
            print("seen", await store.seen("event-key", 300), flush=True)

        # one turn of the event loop: one batch, one transaction (store/sqlite.py _Writer.submit)
        await asyncio.gather(
            admit("one", [NewItem("one", "ns/p", b"1")]),
            admit("two", [NewItem("two-a", "ns/p", b"2"), NewItem("two-b", "ns/q", b"2")]),
            window(),
            store._run(hold),
        )

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_sigkill_inside_a_group_commit_keeps_what_was_answered_and_nothing_unanswered(
    tmp_path: Path,
) -> None:
    """A batch of two events' appends and a duplicate-window claim is held open by its last call; SIGKILL
    then. Nothing of the open batch was answered (the 202 waits for the commit), none of its rows is in the
    file afterwards, what was answered before is, and the claim went with the batch (the emitter's retry is
    not called a duplicate)."""
    path = tmp_path / "state.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        IN_BATCH,
        str(path),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(60):
        while "in-batch" not in lines:
            line = await proc.stdout.readline()
            assert line, f"the writer died: {lines}"
            lines.append(line.decode().strip())
    await asyncio.sleep(0.5)  # an answer given before the commit would be printed by now
    await _kill(proc)
    lines += [line.strip() for line in (await proc.stdout.read()).decode().splitlines()]
    assert [line for line in lines if line.startswith(("202", "seen"))] == ["202 before"], lines

    store = SQLiteStore(path)
    await store.start()
    try:
        found = set()
        for lane in ("ns/p", "ns/q"):
            while (lease := await store.lease(lane)) is not None:
                found.add(lease.id)
        assert found == {"before"}
        assert await store.seen("event-key", 300) is False  # the claim went with the batch
    finally:
        await store.close()

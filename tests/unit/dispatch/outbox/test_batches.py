"""Group commit on the loop's side (dispatch/outbox/batches.py): the coalescer's batches, and the hand-off
of an appended item to a free worker, on a real SQLite file."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from notification_controller.dispatch.model import DELIVERED, Result
from notification_controller.dispatch.outbox import DurableSettings, OutboxRunner
from notification_controller.dispatch.outbox.batches import Coalescer
from notification_controller.errors import StoreError
from notification_controller.store.base import Lease, NewItem
from notification_controller.store.sqlite import SQLiteStore


class _Owner:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def own(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


async def test_a_lone_call_is_served_at_once_and_calls_made_meanwhile_go_together() -> None:
    batches: list[list[int]] = []
    gate = asyncio.Event()

    async def serve(args: list[int]) -> list[str]:
        batches.append(args)
        if len(batches) == 1:
            await gate.wait()  # the first batch is being served...
        return [f"r{a}" for a in args[:-1]]  # one answer short: the last gets the fill

    owner = _Owner()
    coalesce: Coalescer[int, str] = Coalescer(serve, "none", owner.own)
    first = asyncio.create_task(coalesce(0))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert batches == [[0]]  # no timer: served alone, at once
    later = [asyncio.create_task(coalesce(i)) for i in (1, 2, 3)]  # ...these wait for the next
    await asyncio.sleep(0)
    gate.set()
    assert await first == "none"
    assert await asyncio.gather(*later) == ["r1", "r2", "none"]
    assert batches == [[0], [1, 2, 3]]
    assert not coalesce.serving


async def test_a_store_error_fails_its_batch_only() -> None:
    calls = 0

    async def serve(args: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StoreError("locked")
        return args

    owner = _Owner()
    coalesce: Coalescer[int, int] = Coalescer(serve, 0, owner.own)
    with pytest.raises(StoreError, match="locked"):
        await coalesce(1)
    assert await coalesce(2) == 2


async def test_an_item_appended_for_a_free_worker_is_delivered_without_a_lease(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "outbox.db", ack_wait=30)
    await store.start()
    delivered: list[tuple[str, int]] = []
    leased = 0
    lease = store.lease

    async def counted(provider: str) -> Lease | None:
        nonlocal leased
        leased += 1
        return await lease(provider)

    store.lease = counted  # type: ignore[method-assign]  # counts the round trips the hand-off saves

    async def deliver(lease: Lease) -> Result:
        delivered.append((lease.id, lease.attempts))
        return DELIVERED

    runner = OutboxRunner(store, deliver, DurableSettings(concurrency=2, poll_interval=3600))
    runner.start()
    try:
        assert runner.reserve("ns/p") and runner.reserve("ns/p")
        assert not runner.reserve("ns/p")  # both slots taken
        items = [NewItem("a", "ns/p", b"1"), NewItem("b", "ns/p", b"2")]
        leases = await store.append_held(items, [True, True])
        assert [(x.id, x.attempts) for x in leases] == [("a", 1), ("b", 1)]
        assert await store.lease("ns/p") is None  # held: nobody else can lease them
        for held in leases:
            runner.start_held("ns/p", held)
        async with asyncio.timeout(10):
            while await store.stats():
                await asyncio.sleep(0.01)
        assert sorted(delivered) == [("a", 1), ("b", 1)]
        assert leased == 1  # only the check above: the workers leased nothing
        # a lane that may have items no worker holds hands nothing off: older items go first
        assert runner.reserve("ns/p")
        runner.wake("ns/p")  # another append went to the store, not to a worker
        assert not runner.reserve("ns/p")
        runner.unreserve("ns/p")
        # an id already in the outbox is not handed to anyone
        await store.append([NewItem("d", "ns/q", b"4")])
        assert await store.append_held([NewItem("d", "ns/q", b"4")], [True]) == []
    finally:
        await runner.stop()
        await store.close()

"""The memory ring: bounded, newest first, filtered, counted, with a live tail that never holds it back."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.history import open_history
from notification_controller.history.live import QUEUE_SIZE
from notification_controller.history.memory import MemoryHistory
from notification_controller.history.model import Outcome, Query, Record, new_record_id
from notification_controller.metrics import HistoryMetrics
from notification_controller.settings import HistorySettings


def rec(i: int, outcome: Outcome = Outcome.DELIVERED, alert: str = "ns/a") -> Record:
    return Record(
        new_record_id(),
        float(i),
        f"e{i}",
        f"n{i}",
        "Kustomization/ns/app",
        "info",
        "R",
        "m",
        alert,
        "ns/p",
        "generic",
        outcome,
    )


async def test_the_ring_keeps_the_newest_records_only() -> None:
    history = MemoryHistory(max_records=100)
    for i in range(1000):
        history.record(rec(i))
    assert len(history) == 100
    got = await history.query(Query(limit=1000))
    assert [r.time for r in got] == [float(i) for i in range(999, 899, -1)]


async def test_query_filters_and_stops_at_the_limit() -> None:
    history = MemoryHistory()
    for i in range(50):
        history.record(rec(i, Outcome.FAILED if i % 2 else Outcome.DELIVERED, alert=f"ns/a{i % 5}"))
    failed = await history.query(Query(outcome="failed", limit=5))
    assert [r.time for r in failed] == [49.0, 47.0, 45.0, 43.0, 41.0]
    assert all(r.alert == "ns/a3" for r in await history.query(Query(alert="ns/a3")))
    assert len(await history.query(Query(alert="ns/a3"))) == 10
    assert [r.time for r in await history.query(Query(since=10, until=12))] == [12.0, 11.0, 10.0]


async def test_records_are_counted_by_outcome() -> None:
    registry = CollectorRegistry()
    history = MemoryHistory(metrics=HistoryMetrics(registry))
    history.record(rec(1, Outcome.SUPPRESSED))
    history.record(rec(2, Outcome.SUPPRESSED))
    history.record(rec(3, Outcome.REFUSED))
    value = registry.get_sample_value
    assert value("notification_history_records_total", {"outcome": "suppressed"}) == 2
    assert value("notification_history_records_total", {"outcome": "refused"}) == 1
    assert value("notification_history_dropped_total") == 0


async def test_a_subscriber_sees_new_records_and_a_slow_one_never_blocks() -> None:
    history = MemoryHistory()
    live = history.subscribe()
    first = asyncio.ensure_future(anext(live))
    await asyncio.sleep(0)  # the subscriber registers
    history.record(rec(1))
    assert (await asyncio.wait_for(first, 10)).time == 1.0
    for i in range(QUEUE_SIZE * 4):  # nobody reads: recording goes on, the subscriber misses records
        history.record(rec(i))
    assert len(history) == QUEUE_SIZE * 4 + 1
    await history.close()
    seen = [r async for r in live]
    assert len(seen) <= QUEUE_SIZE


def test_open_history_follows_the_flag() -> None:
    assert open_history(HistorySettings(enabled=False), "memory") is None
    assert isinstance(open_history(HistorySettings(max_records=5), "memory"), MemoryHistory)
    with pytest.raises(ValueError, match="history-max-records"):
        MemoryHistory(0)

"""The live tail: every subscriber gets every record, a slow one misses (counted), the number is bounded."""

from __future__ import annotations

import asyncio

from notification_controller.history.live import MAX_SUBSCRIBERS, QUEUE_SIZE, Fanout
from notification_controller.history.model import Outcome, Record, new_record_id


def rec(i: int) -> Record:
    return Record(new_record_id(), float(i), "e", "", "", "info", "R", "m", "", "", "", Outcome.UNMATCHED)


async def test_every_subscriber_gets_every_record_in_order() -> None:
    fanout = Fanout()
    tails = [fanout.subscribe() for _ in range(3)]
    firsts = [asyncio.ensure_future(anext(t)) for t in tails]
    await asyncio.sleep(0)
    assert len(fanout) == 3
    for i in range(5):
        fanout.publish(rec(i))
    assert [(await asyncio.wait_for(f, 10)).time for f in firsts] == [0.0, 0.0, 0.0]
    fanout.close()
    for t in tails:
        assert [r.time async for r in t] == [1.0, 2.0, 3.0, 4.0]
    assert len(fanout) == 0, "a finished tail unsubscribes"


async def test_a_slow_subscriber_misses_records_and_still_ends() -> None:
    fanout = Fanout()
    tail = fanout.subscribe()
    first = asyncio.ensure_future(anext(tail))
    await asyncio.sleep(0)
    for i in range(QUEUE_SIZE * 3):
        fanout.publish(rec(i))
    assert (await asyncio.wait_for(first, 10)).time == 0.0
    fanout.close()  # the queue is full: the end mark still gets in
    rest = [r async for r in tail]
    assert len(rest) < QUEUE_SIZE


async def test_subscribers_are_bounded() -> None:
    fanout = Fanout()
    tails = [fanout.subscribe() for _ in range(MAX_SUBSCRIBERS + 1)]
    pending = [asyncio.ensure_future(anext(t)) for t in tails]
    await asyncio.sleep(0)
    assert len(fanout) == MAX_SUBSCRIBERS
    done = [p for p in pending if p.done()]
    assert len(done) == 1 and isinstance(done[0].exception(), StopAsyncIteration)
    fanout.close()
    await asyncio.gather(*pending, return_exceptions=True)

"""The live tail of a history (``History.subscribe``): every record recorded from now on, to each subscriber.

The UI's server-sent events read it. A subscriber is a bounded queue: one that does not keep up misses
records (counted per subscriber in ``missed``) and never holds the recorder back, which runs on the
pipeline's path and must not wait. The number of subscribers is bounded too (``MAX_SUBSCRIBERS``): each
open event stream costs a queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from .model import Record

QUEUE_SIZE = 256
"""Records a subscriber may fall behind by before it misses some."""

MAX_SUBSCRIBERS = 64
"""Live tails open at once; one more waits for nothing and ends at once (the caller should refuse it)."""


class Subscriber:
    __slots__ = ("missed", "queue")

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Record | None] = asyncio.Queue(QUEUE_SIZE)
        self.missed = 0


class Fanout:
    """Hands each published record to every subscriber's queue, dropping for the slow ones."""

    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()
        """Read by the backends' ``record_row`` (``if live.subscribers:``): a record is built for the live
        tail only when someone reads it."""

    def __len__(self) -> int:
        return len(self.subscribers)

    def publish(self, r: Record) -> None:
        for sub in self.subscribers:
            try:
                sub.queue.put_nowait(r)
            except asyncio.QueueFull:
                sub.missed += 1

    def close(self) -> None:
        """End every subscription (the iterators return)."""
        for sub in self.subscribers:
            while True:
                try:
                    sub.queue.put_nowait(None)
                    break
                except asyncio.QueueFull:
                    sub.queue.get_nowait()  # make room for the end mark: the reader is leaving anyway

    async def subscribe(self) -> AsyncIterator[Record]:
        if len(self.subscribers) >= MAX_SUBSCRIBERS:
            return
        sub = Subscriber()
        self.subscribers.add(sub)
        try:
            while True:
                r = await sub.queue.get()
                if r is None:
                    return
                yield r
        finally:
            self.subscribers.discard(sub)

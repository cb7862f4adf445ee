"""The duplicate-event window shared by every replica: Flux's limiter on the state store.

Flux's controller (and this one with ``--store=memory``) keeps the 5-minute duplicate window in each pod:
with two replicas behind a Service, the same event POSTed to both is delivered twice. With a durable store
the window is the store's ``seen`` (``store/base.py``): atomic, first caller wins on any replica; the
second POST of an event within ``--rate-limit-interval`` gets Flux's 429.

The answer headers keep Flux's shape (``X-RateLimit-*``, ``Retry-After`` on a 429). The store answers only
"first or not", so the reset time of a duplicate is an upper bound (now + interval) where the in-process
limiter knows the exact end of the window; Flux's emitters do not read it.

``release`` undoes a ``take`` whose work then failed (the append to the outbox): the emitter's retry of a
503 must not be turned into a 429.
"""

from __future__ import annotations

from ..core.ratelimit import Decision
from ..lib.clock import Clock
from ..store.base import Store


class SharedDuplicateWindow:
    def __init__(self, store: Store, interval: float, clock: Clock) -> None:
        self.store = store
        self.interval = interval
        self.clock = clock

    async def take(self, key: str) -> Decision:
        """Raises ``StoreError`` when the store cannot answer."""
        duplicate = await self.store.seen(key, self.interval)
        reset = self.clock.now().timestamp() + self.interval
        return Decision(allowed=not duplicate, limit=1, remaining=0, reset_at=reset)

    async def release(self, key: str) -> None:
        await self.store.forget(key, self.interval)

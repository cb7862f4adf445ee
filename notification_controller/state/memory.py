"""The ``memory`` store: today's behaviour, Flux's at-most-once contract.

Everything lives in this process: a restart forgets the outbox, the dead letters and the duplicate
window, and two replicas each have their own (so duplicates leak between them, as with Flux). It is the
default because it needs nothing, and the reference semantics the other backends are tested against
(``tests/integration/test_state_contract.py``). Single event loop: no locks needed, no method awaits
between reading and writing, so every operation is atomic.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.clock import Clock, SystemClock
from .base import DEFAULT_ACK_WAIT, DeadLetter, KVEntry, LaneStats, Lease, NewItem


@dataclass
class _Item:
    seq: int
    id: str
    provider: str
    payload: bytes
    enqueued_at: float
    due_at: float
    attempts: int = 0
    lease_until: float = 0.0
    lease_token: str = ""


class MemoryStore:
    kind = "memory"
    durable = False

    def __init__(self, *, clock: Clock | None = None, ack_wait: float = DEFAULT_ACK_WAIT) -> None:
        self._clock = clock or SystemClock()
        self.ack_wait = ack_wait
        self._seq = itertools.count(1)
        self._items: dict[str, _Item] = {}
        self._dead: dict[str, DeadLetter] = {}
        self._seen: dict[str, float] = {}
        self._sweep_at = 4096
        self._kv: dict[str, tuple[KVEntry, float | None]] = {}
        self._revision = itertools.count(1)

    def _now(self) -> float:
        return self._clock.now().timestamp()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    # ---- outbox ------------------------------------------------------------------------------------
    async def append(self, items: Sequence[NewItem]) -> None:
        now = self._now()
        for item in items:
            if item.id not in self._items:
                self._items[item.id] = _Item(next(self._seq), item.id, item.provider, item.payload, now, now)

    async def lease(self, provider: str) -> Lease | None:
        now = self._now()
        due = [
            i
            for i in self._items.values()
            if i.provider == provider and i.due_at <= now and i.lease_until <= now
        ]
        if not due:
            return None
        item = min(due, key=lambda i: (i.due_at, i.seq))
        item.attempts += 1
        item.lease_until = now + self.ack_wait
        item.lease_token = uuid.uuid4().hex
        return Lease(item.id, item.provider, item.payload, item.attempts, item.enqueued_at, item.lease_token)

    def _held(self, lease: Lease) -> _Item | None:
        item = self._items.get(lease.id)
        if item is None or item.lease_token != lease.token:
            return None  # acknowledged already, or the lease expired and another worker took it
        return item

    async def ack(self, lease: Lease) -> None:
        if self._held(lease) is not None:
            del self._items[lease.id]

    async def nack(self, lease: Lease, *, delay: float) -> None:
        item = self._held(lease)
        if item is not None:
            item.due_at = self._now() + max(0.0, delay)
            item.lease_until = 0.0
            item.lease_token = ""

    async def dead_letter(self, lease: Lease, *, reason: str, error: str) -> None:
        item = self._held(lease)
        if item is None:
            return
        del self._items[lease.id]
        self._dead[item.id] = DeadLetter(
            item.id, item.provider, item.payload, item.attempts, item.enqueued_at, self._now(), reason, error
        )

    async def stats(self) -> dict[str, LaneStats]:
        now = self._now()
        oldest: dict[str, float] = {}
        depth: dict[str, int] = {}
        for item in self._items.values():
            depth[item.provider] = depth.get(item.provider, 0) + 1
            oldest[item.provider] = min(oldest.get(item.provider, item.enqueued_at), item.enqueued_at)
        return {p: LaneStats(depth[p], max(0.0, now - oldest[p])) for p in depth}

    # ---- dead letters --------------------------------------------------------------------------------
    async def dead_letters(self, *, provider: str | None = None, limit: int = 1000) -> list[DeadLetter]:
        found = [d for d in self._dead.values() if provider is None or d.provider == provider]
        return found[:limit]

    async def replay(self, ids: Sequence[str]) -> int:
        now = self._now()
        count = 0
        for id_ in ids:
            dead = self._dead.pop(id_, None)
            if dead is None:
                continue
            count += 1
            if dead.id not in self._items:
                self._items[dead.id] = _Item(next(self._seq), dead.id, dead.provider, dead.payload, now, now)
        return count

    async def drop(self, ids: Sequence[str]) -> int:
        return sum(1 for id_ in ids if self._dead.pop(id_, None) is not None)

    # ---- duplicate window and KV ---------------------------------------------------------------------
    async def seen(self, key: str, ttl: float) -> bool:
        now = self._now()
        expires = self._seen.get(key)
        if expires is not None and expires > now:
            return True
        if len(self._seen) >= self._sweep_at:  # amortised sweep of the expired keys
            self._seen = {k: v for k, v in self._seen.items() if v > now}
            self._sweep_at = max(4096, 2 * len(self._seen))
        self._seen[key] = now + ttl
        return False

    async def forget(self, key: str, ttl: float) -> None:
        self._seen.pop(key, None)

    def _live(self, key: str) -> KVEntry | None:
        found = self._kv.get(key)
        if found is None:
            return None
        entry, expires = found
        if expires is not None and expires <= self._now():
            del self._kv[key]
            return None
        return entry

    async def kv_get(self, key: str) -> KVEntry | None:
        return self._live(key)

    async def kv_put(self, key: str, value: bytes, *, ttl: float | None = None) -> int:
        entry = KVEntry(value, next(self._revision))
        self._kv[key] = (entry, None if ttl is None else self._now() + ttl)
        return entry.revision

    async def kv_cas(
        self, key: str, value: bytes, *, expected: int | None, ttl: float | None = None
    ) -> int | None:
        current = self._live(key)
        if (current.revision if current is not None else None) != expected:
            return None
        return await self.kv_put(key, value, ttl=ttl)

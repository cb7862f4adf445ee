"""The ``memory`` store: today's behaviour, Flux's at-most-once contract.

Everything lives in this process: a restart forgets the outbox, the dead letters and the duplicate
window, and two replicas each have their own (so duplicates leak between them, as with Flux). It is the
default because it needs nothing, and the reference semantics the other backends are tested against
(``tests/integration/test_state_contract.py``). Single event loop: no locks needed, no method awaits
between reading and writing, so every operation is atomic.

Expired keys (KV and duplicate window) are deleted, not just hidden: every operation first removes what
has expired since the last one, and a timer does so at the next deadline while nothing calls (issue 23
item 5: 200,000 noise keys used to stay in memory for ever after their TTL). ``Deadlines`` finds them with a
heap (``lib/deadlines.py``), so a sweep costs O(expired · log n), never a scan of every key.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ..lib.clock import Clock, SystemClock
from ..lib.deadlines import Deadlines
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
        self._seen = Deadlines()
        self._kv: dict[str, tuple[bytes, int]] = {}
        self._kv_expiry = Deadlines()
        self._revision = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def _now(self) -> float:
        return self._clock.now().timestamp()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

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
    def sweep(self) -> int:
        """Delete every expired KV key and duplicate-window key; return how many. Called by every
        window/KV operation and by the timer, so expired keys never accumulate."""
        now = self._now()
        gone = self._seen.expired(now)
        expired = self._kv_expiry.expired(now)
        kv = self._kv
        for key in expired:
            del kv[key]
        return len(gone) + len(expired)

    def keys(self) -> int:
        """Live KV keys plus duplicate-window keys (what ``sweep`` bounds; tests and benchmarks read it)."""
        return len(self._kv) + len(self._seen)

    def _arm(self, deadline: float) -> None:
        """Make sure a sweep runs at ``deadline`` even if no operation comes: one timer at a time, and
        deadlines less than a second apart share a sweep."""
        if self._timer is not None and self._timer_at <= deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        now = self._now()
        self._timer_at = max(deadline, now + 1.0)
        self._timer = asyncio.get_running_loop().call_later(self._timer_at - now, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.sweep()
        nexts = [when for when in (self._seen.next(), self._kv_expiry.next()) if when is not None]
        if nexts:
            self._arm(min(nexts))

    async def seen(self, key: str, ttl: float) -> bool:
        self.sweep()
        if key in self._seen.at:
            return True
        deadline = self._now() + ttl
        self._seen.set(key, deadline)
        self._arm(deadline)
        return False

    async def forget(self, key: str, ttl: float) -> None:
        self._seen.discard(key)

    async def kv_get(self, key: str) -> KVEntry | None:
        self.sweep()
        found = self._kv.get(key)
        return KVEntry(*found) if found is not None else None

    async def kv_put(self, key: str, value: bytes, *, ttl: float | None = None) -> int:
        self.sweep()
        return self._put(key, value, ttl)

    def _put(self, key: str, value: bytes, ttl: float | None) -> int:
        revision = next(self._revision)
        self._kv[key] = (value, revision)  # a tuple: a third of a KVEntry's size, built on read
        if ttl is None:
            self._kv_expiry.discard(key)
        else:
            deadline = self._now() + ttl
            self._kv_expiry.set(key, deadline)
            self._arm(deadline)
        return revision

    async def kv_cas(
        self, key: str, value: bytes, *, expected: int | None, ttl: float | None = None
    ) -> int | None:
        self.sweep()
        current = self._kv.get(key)
        if (current[1] if current is not None else None) != expected:
            return None
        return self._put(key, value, ttl)

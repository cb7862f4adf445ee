"""A ``Store`` that measures another: duration and errors of every operation, and readiness.

The dispatcher and the servers see this wrapper, never the backend directly, so every backend is measured
the same way (``notification_store_operation_duration_seconds``, ``notification_store_errors_total``).
``healthy`` and ``last_error`` record the last answer for diagnostics only: readiness asks the store itself
(``ping``), and the event server asks it with every event, because a remembered failure outlived a NATS
leader election by seconds (issue 23 item 10).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, cast

from ..errors import StoreError
from ..metrics import DeliveryMetrics
from .base import BatchOutbox, DeadLetter, HeldAppend, KVEntry, LaneStats, Lease, NewItem, Store

T = TypeVar("T")

OPERATIONS = (
    "append",
    "lease",
    "ack",
    "nack",
    "dead_letter",
    "stats",
    "dead_letters",
    "replay",
    "drop",
    "seen",
    "forget",
    "kv_get",
    "kv_put",
    "kv_cas",
    "ping",
)


class InstrumentedStore:
    def __init__(self, inner: Store, metrics: DeliveryMetrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self.kind = inner.kind
        self.durable = inner.durable
        self.batches = isinstance(inner, BatchOutbox)
        """Whether the backend leases and acks in batches (SQLite, NATS); else ``lease_many`` is ``lease``."""
        self.holds = isinstance(inner, HeldAppend)
        """Whether ``append_held`` leases anything (SQLite); otherwise it is ``append``."""
        self.healthy = True
        self.last_error = ""
        self._duration = {
            op: metrics.store_duration.labels(store=inner.kind, operation=op) for op in OPERATIONS
        }
        self._errors = {op: metrics.store_errors.labels(store=inner.kind, operation=op) for op in OPERATIONS}

    async def _call(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.perf_counter()
        try:
            result = await call()
        except StoreError as exc:
            self._errors[operation].inc()
            self.healthy = False
            self.last_error = str(exc)
            raise
        finally:
            self._duration[operation].observe(time.perf_counter() - started)
        self.healthy = True
        return result

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def ping(self) -> None:
        await self._call("ping", self.inner.ping)

    async def append(self, items: Sequence[NewItem]) -> None:
        await self._call("append", lambda: self.inner.append(items))

    async def append_held(self, items: Sequence[NewItem], hold: Sequence[bool]) -> list[Lease]:
        """``HeldAppend.append_held`` of the backend; a backend without it appends and leases nothing."""
        if self.holds:  # not isinstance at each call: a runtime Protocol check walks its attributes
            inner = cast(HeldAppend, self.inner)
            return await self._call("append", lambda: inner.append_held(items, hold))
        await self.append(items)
        return []

    async def lease_many(self, provider: str, limit: int) -> list[Lease]:
        if self.batches:
            batched = cast(BatchOutbox, self.inner)
            return await self._call("lease", lambda: batched.lease_many(provider, limit))
        one = await self.lease(provider)
        return [one] if one is not None else []

    async def ack_many(self, leases: Sequence[Lease]) -> None:
        if self.batches:
            batched = cast(BatchOutbox, self.inner)
            await self._call("ack", lambda: batched.ack_many(leases))
            return
        for lease in leases:
            await self.ack(lease)

    async def lease(self, provider: str) -> Lease | None:
        return await self._call("lease", lambda: self.inner.lease(provider))

    async def ack(self, lease: Lease) -> None:
        await self._call("ack", lambda: self.inner.ack(lease))

    async def nack(self, lease: Lease, *, delay: float) -> None:
        await self._call("nack", lambda: self.inner.nack(lease, delay=delay))

    async def dead_letter(self, lease: Lease, *, reason: str, error: str) -> None:
        await self._call("dead_letter", lambda: self.inner.dead_letter(lease, reason=reason, error=error))

    async def stats(self) -> dict[str, LaneStats]:
        return await self._call("stats", self.inner.stats)

    async def dead_letters(self, *, provider: str | None = None, limit: int = 1000) -> list[DeadLetter]:
        return await self._call(
            "dead_letters", lambda: self.inner.dead_letters(provider=provider, limit=limit)
        )

    async def replay(self, ids: Sequence[str]) -> int:
        return await self._call("replay", lambda: self.inner.replay(ids))

    async def drop(self, ids: Sequence[str]) -> int:
        return await self._call("drop", lambda: self.inner.drop(ids))

    async def seen(self, key: str, ttl: float) -> bool:
        return await self._call("seen", lambda: self.inner.seen(key, ttl))

    async def forget(self, key: str, ttl: float) -> None:
        await self._call("forget", lambda: self.inner.forget(key, ttl))

    async def kv_get(self, key: str) -> KVEntry | None:
        return await self._call("kv_get", lambda: self.inner.kv_get(key))

    async def kv_put(self, key: str, value: bytes, *, ttl: float | None = None) -> int:
        return await self._call("kv_put", lambda: self.inner.kv_put(key, value, ttl=ttl))

    async def kv_cas(
        self, key: str, value: bytes, *, expected: int | None, ttl: float | None = None
    ) -> int | None:
        return await self._call("kv_cas", lambda: self.inner.kv_cas(key, value, expected=expected, ttl=ttl))

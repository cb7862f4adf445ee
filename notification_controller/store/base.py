"""The store's interface (``--store``): one ``Store`` whatever keeps the state (memory, SQLite, NATS JetStream).

Issue 13 turns Flux's "202 and forget" into durable, at-least-once delivery. Everything the dispatcher
and the receivers must share across a restart or across replicas goes through this interface, so the
pipeline never knows which backend it runs on (``open_store(url)`` picks one):

* an **outbox**: notifications as opaque bytes (the dispatcher serialises them), each with a stable id
  (the ``Idempotency-Key`` sent to providers) and a provider key (one lane per Provider). A worker
  *leases* the next due item of its lane for ``ack_wait`` seconds, then ``ack`` (delivered),
  ``nack(delay)`` (retry later) or ``dead_letter`` (gave up). A process killed while it holds a lease
  loses nothing: the item is due again once the lease runs out — hence at-least-once, never exactly-once.
* **dead letters**: kept with their last error (the caller masks it; the store masks nothing), listed,
  replayed into the outbox or dropped (the ``dead-letters`` CLI).
* a **duplicate window**: ``seen(key, ttl)`` answers atomically, first caller wins, across replicas —
  Flux's per-pod duplicate limiter made shared.
* a small **KV** with compare-and-set and TTL for other shared state (receiver replay ids, noise control).

Backends raise ``StoreError`` (``errors.py``) when the state cannot be reached; callers turn it into a 503
(the emitter retries) and a metric. Time is injected (``lib.clock.Clock``) where the backend keeps time
itself (memory, SQLite); JetStream keeps its own (ack wait, bucket TTLs), on the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

DEFAULT_ACK_WAIT = 30.0
"""Seconds a lease lasts: longer than one delivery attempt (timeouts included), short enough that a
notification held by a killed replica is retried soon."""


@dataclass(frozen=True)
class NewItem:
    """A notification to append to the outbox."""

    id: str
    """Stable id, unique in the outbox; appending an id twice stores it once (idempotent append)."""
    provider: str
    """The lane key (e.g. ``namespace/provider-name``); any non-empty string."""
    payload: bytes


@dataclass(frozen=True)
class Lease:
    """An outbox item held by one worker until ``deadline`` (epoch seconds, best known)."""

    id: str
    provider: str
    payload: bytes
    attempts: int
    """Deliveries of this item including this one (1 on the first lease; redeliveries count)."""
    enqueued_at: float
    """Epoch seconds at append: with ``--delivery-max-age`` decides when to dead-letter."""
    token: str
    """Opaque handle naming this lease (backend-specific)."""


@dataclass(frozen=True)
class DeadLetter:
    id: str
    provider: str
    payload: bytes
    attempts: int
    enqueued_at: float
    dead_at: float
    reason: str
    """Short, low-cardinality reason (a metric label): ``max-age``, ``permanent``, ..."""
    error: str
    """The last error, masked by the caller."""


@dataclass(frozen=True)
class LaneStats:
    depth: int
    """Items not yet acknowledged or dead-lettered (due, delayed and leased)."""
    oldest_age: float
    """Seconds since the oldest of them was appended (0 when empty)."""


@dataclass(frozen=True)
class Retention:
    """How long a store keeps what nobody acknowledges (``--store-dead-letter-*``; defaults in settings.py).

    A backend that keeps time itself (SQLite) enforces it with a periodic sweep; JetStream with stream
    limits. ``None`` for a store opened by the ``dead-letters`` command: it must not delete what the
    controller's own limits would keep."""

    dead_letter_max_age: float
    """Seconds a dead letter is kept after it died."""
    dead_letter_max_bytes: int
    """Size of the dead letters (payload, error and ids) above which the oldest are deleted; 0: no cap."""


@dataclass(frozen=True)
class KVEntry:
    value: bytes
    revision: int
    """Changes on every write of the key; what ``kv_cas`` compares."""


@runtime_checkable
class HeldAppend(Protocol):
    """A store that appends and leases in one transaction (SQLite): ``append`` whose items marked in
    ``hold`` come back leased to the caller (attempt 1, ``ack_wait``), so that a worker that is free now
    delivers them without a ``lease`` of its own; an id already in the outbox is leased to nobody and left
    out of the answer."""

    async def append_held(self, items: Sequence[NewItem], hold: Sequence[bool]) -> list[Lease]: ...


@runtime_checkable
class BatchOutbox(Protocol):
    """A store that serves several leases or acks in one call (SQLite: one round trip to its writer thread
    and one share of a commit; NATS is not one, see ``NATSStore.lease``). ``lease_many``: up to ``limit`` due items of a lane, oldest first (for as many
    workers waiting now: never ahead of them). ``ack_many``: ``ack`` for each."""

    async def lease_many(self, provider: str, limit: int) -> list[Lease]: ...

    async def ack_many(self, leases: Sequence[Lease]) -> None: ...


@runtime_checkable
class Store(Protocol):
    """The store. Every method may raise ``StoreError``; none blocks the event loop."""

    kind: str
    """``memory``, ``sqlite`` or ``nats``: metric label and log field."""
    durable: bool
    """Whether an appended item survives the process (False for ``memory``)."""

    async def start(self) -> None:
        """Connect / open / create what is missing. Idempotent."""
        ...

    async def close(self) -> None:
        """Release connections and threads. Leases held are not released: they expire."""
        ...

    async def ping(self) -> None:
        """Raise ``StoreError`` when the state cannot be written (readiness: ``/readyz`` calls it with a
        short timeout, so it must answer promptly, and prove what an event POST needs: that an append can
        be stored now, not merely that a connection exists)."""
        ...

    # ---- outbox ------------------------------------------------------------------------------------
    async def append(self, items: Sequence[NewItem]) -> None:
        """Store every item durably (one transaction where the backend has them) before returning:
        the event server answers 202 only after this returns. An id already in the outbox is skipped."""
        ...

    async def lease(self, provider: str) -> Lease | None:
        """The next due item of ``provider``'s lane, held for ``ack_wait`` seconds; None if none is due."""
        ...

    async def ack(self, lease: Lease) -> None:
        """Delivered: remove the item."""
        ...

    async def nack(self, lease: Lease, *, delay: float) -> None:
        """Not delivered: make the item due again after ``delay`` seconds."""
        ...

    async def dead_letter(self, lease: Lease, *, reason: str, error: str) -> None:
        """Give up on the item: move it from the outbox to the dead letters."""
        ...

    async def stats(self) -> dict[str, LaneStats]:
        """Depth and oldest age per provider key with items (absent key: empty lane)."""
        ...

    # ---- dead letters --------------------------------------------------------------------------------
    async def dead_letters(self, *, provider: str | None = None, limit: int = 1000) -> list[DeadLetter]:
        """Dead letters, oldest first, optionally of one provider key."""
        ...

    async def replay(self, ids: Sequence[str]) -> int:
        """Re-queue these dead letters in the outbox (attempts restart); return how many were found."""
        ...

    async def drop(self, ids: Sequence[str]) -> int:
        """Forget these dead letters; return how many were found."""
        ...

    # ---- duplicate window and KV ---------------------------------------------------------------------
    async def seen(self, key: str, ttl: float) -> bool:
        """Atomically: False for the first caller (the key is recorded for ``ttl`` seconds), True for
        every caller until then, on every replica sharing the store."""
        ...

    async def forget(self, key: str, ttl: float) -> None:
        """Take ``key`` out of the ``ttl`` duplicate window (its ``seen`` answered False but the work it
        admitted failed, e.g. the append after it: the emitter's retry must not be called a duplicate)."""
        ...

    async def kv_get(self, key: str) -> KVEntry | None: ...

    async def kv_put(self, key: str, value: bytes, *, ttl: float | None = None) -> int:
        """Write unconditionally; return the new revision. ``ttl``: the key reads as absent after it."""
        ...

    async def kv_cas(
        self, key: str, value: bytes, *, expected: int | None, ttl: float | None = None
    ) -> int | None:
        """Write only if the key's revision is ``expected`` (None: only if absent). Return the new
        revision, or None when another writer came first."""
        ...

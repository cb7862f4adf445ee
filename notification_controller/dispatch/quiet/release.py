"""Releases: when a failing object recovers and an Alert held notifications under it but did not take
the recovery itself (``eventSeverity: error``, no event source for it), that Alert gets a notification of
its own ``RELEASE_DELAY`` seconds later naming what it held (``quiet/inhibit.py``). The record is claimed
by compare-and-set first, so the recovery's own line and the release never both name the objects; the
notification's id is derived from the failure, so two replicas store one outbox item. Like the noise
flusher (``noise/flush.py``) it is a producer given the queue's ``enqueue``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence

from ...api.event import Event
from ...core.noise import digest
from ...errors import StoreError
from ...lib.clock import Clock
from ...lib.deadlines import Deadlines
from ...objects.base import ObjectStore
from ...objects.graph import Node, describe
from ...providers.message import Message
from ...store.base import KVEntry, Store
from ..model import Notification, Ref
from .failing import HELD_METADATA, RECOVERED_TTL, Held, held_key, held_line, parse_node, update

log = logging.getLogger(__name__)

RELEASE_DELAY = 2.0
"""Seconds after a recovery before the Alerts that did not take it get a release notification of their
own (the stage that takes it claims the record first)."""
MAX_PENDING_RELEASES = 10_000

Enqueue = Callable[[Notification], Awaitable[None]]


class Releases:
    """Recoveries waiting for their release, in this process (the one that observed them)."""

    def __init__(
        self, state: Store, objects: ObjectStore, clock: Clock, failed: Callable[[str, StoreError], None]
    ) -> None:
        self.state = state
        self.objects = objects
        self.clock = clock
        self.failed = failed
        self._due = Deadlines()  # Kind/ns/name of a recovered object -> when to release
        self._events: dict[str, Event] = {}  # ... and its recovery event

    def schedule(self, node: Node, event: Event) -> bool:
        """Release ``node``'s record after ``RELEASE_DELAY``; False when too many wait already."""
        key = describe(node)
        if key not in self._events and len(self._events) >= MAX_PENDING_RELEASES:
            return False
        self._events[key] = event
        self._due.set(key, self.clock.now().timestamp() + RELEASE_DELAY)
        return True

    async def due(self, enqueue: Enqueue) -> int:
        """Send the release notification of every recovery due; how many were sent."""
        sent = 0
        for key in self._due.expired(self.clock.now().timestamp()):
            event = self._events.pop(key, None)
            if event is None:
                continue
            try:
                sent += await self._release(parse_node(key), event, enqueue)
            except StoreError as exc:
                self.failed("release", exc)
        return sent

    async def _release(self, node: Node, event: Event, enqueue: Enqueue) -> int:
        claimed: list[Held] = []

        def claim(entry: KVEntry | None) -> tuple[bytes, float] | None:
            claimed.clear()
            record = Held.from_bytes(entry.value) if entry is not None else None
            if record is None or not record.alerts:
                return None
            claimed.append(record)
            return Held(record.since, {}).to_bytes(), RECOVERED_TTL

        if not await update(self.state, held_key(node), claim):
            return 0
        record, sent = claimed[0], 0
        for owner, (objects, more) in record.alerts.items():
            notification = self.notification(owner, node, event, objects, more, record.since)
            if notification is None:
                continue
            try:
                await enqueue(notification)
                sent += 1
            except StoreError as exc:
                self.failed("release", exc)
        return sent

    def notification(
        self, owner: str, node: Node, event: Event, objects: Sequence[str], more: int, since: float
    ) -> Notification | None:
        """The notification that names what ``owner`` held while ``node`` failed (None: the Alert or its
        Provider is gone, or the Alert is suspended)."""
        namespace, _, name = owner.partition("/")
        alert = self.objects.alert(namespace, name)
        if alert is None or alert.spec.suspend:
            return None
        provider = self.objects.provider(namespace, alert.spec.provider_ref.name)
        if provider is None:
            return None
        listed = held_line(objects, more)
        text = f"{describe(node)} recovered; held while it failed: {listed}"
        metadata = {**event.metadata, HELD_METADATA: listed}
        released = event.model_copy(update={"message": text, "severity": "info", "metadata": metadata})
        message = Message.of(released)
        return Notification(
            "inhibit-" + digest(owner, describe(node), repr(since)),
            released,
            Ref.of(alert),
            Ref.of(provider),
            str(provider.spec.type),
            message=dataclasses.replace(message, title=f"Released: {message.title}"),
        )

    async def run(self, enqueue: Enqueue, tick: float) -> None:
        """Send due releases every ``tick`` seconds until cancelled."""
        while True:
            await asyncio.sleep(tick)
            try:
                await self.due(enqueue)
            except Exception as exc:  # never let the releaser die: the next tick tries again
                log.error("inhibition: release failed: %s", type(exc).__name__)

"""Durable admission and the shared duplicate window (``server/events.py``, issue 23 item 8).

The event server no longer cancels an admission whose client left (``server/http1.py`` lets it finish:
``tests/adversarial/test_listener_abuse.py`` proves it against the real process). An admission can still be
cancelled — at the end of a shutdown's grace, or past the server's ``max_detached`` — and then the window
it took must be released: otherwise the emitter's retry is answered 429 for the whole interval while
nothing was stored. The dispatcher's ``admit`` is replaced by one that waits on a gate (the store write
in flight); the window is the real ``SharedDuplicateWindow`` on the memory state store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable

from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.core.ratelimit import FixedWindowLimiter
from notification_controller.dispatch.duplicates import SharedDuplicateWindow
from notification_controller.lib.clock import SystemClock
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP
from notification_controller.server.events import EventEndpoint
from notification_controller.server.http1 import Request, Response
from notification_controller.store.memory import MemoryStore
from tests.adversarial.kit import event_body


class GatedDispatcher:
    """A durable store's ``admit``: waits for ``gate`` (a store write in flight), then counts the event as
    stored."""

    def __init__(self) -> None:
        self.gate, self.entered = asyncio.Event(), asyncio.Event()
        self.stored = 0

    def admit(self, event: Event) -> Awaitable[int]:
        return self._store()

    async def _store(self) -> int:
        self.entered.set()
        await self.gate.wait()
        self.stored += 1
        return 1


async def _endpoint() -> tuple[EventEndpoint, GatedDispatcher, OutboundHTTP]:
    clock = SystemClock()
    store = ObjectStore()
    store.mark_synced()
    metrics = EventMetrics(CollectorRegistry())
    http = OutboundHTTP()
    dispatcher = GatedDispatcher()
    window = SharedDuplicateWindow(MemoryStore(clock=clock), 300.0, clock)
    endpoint = EventEndpoint(
        dispatcher, FixedWindowLimiter(300.0, clock), metrics, ready=lambda: True, shared_window=window
    )
    return endpoint, dispatcher, http


def _request() -> Request:
    return Request("POST", "/", [(b"Host", b"x")], "1.1", True, event_body("admission"))


async def _answer(endpoint: EventEndpoint) -> Response:
    result = endpoint(_request())
    return result if isinstance(result, Response) else await result


async def test_a_cancelled_admission_releases_the_window_so_the_retry_is_admitted() -> None:
    endpoint, dispatcher, http = await _endpoint()
    try:
        first = asyncio.ensure_future(_answer(endpoint))
        await asyncio.wait_for(dispatcher.entered.wait(), 2)
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        dispatcher.gate.set()
        retry = await _answer(endpoint)
    finally:
        await http.close()
    assert retry.status == 202 and dispatcher.stored == 1


async def test_a_completed_admission_keeps_the_window() -> None:
    endpoint, dispatcher, http = await _endpoint()
    try:
        dispatcher.gate.set()
        first = await _answer(endpoint)
        retry = await _answer(endpoint)
    finally:
        await http.close()
    assert (first.status, retry.status, dispatcher.stored) == (202, 429, 1)

"""The conductor: event ─> ``Matcher.match`` (matcher.py) ─> per matched Alert, the pre-queue stages
(Flux's rules, noise control; ``stage.Runner``) ─> ``Queue.enqueue``: the memory lanes (lanes.py) or the
durable outbox (outbox/), which hand each notification to ``Deliverer.deliver`` (deliverer.py) at send
time. Everything is given, built by ``builder.py`` before this is constructed; nothing is added later.

``admit`` is the one ingest path. With a queue that is not ``durable`` (the memory store, Flux's at most
once) it answers synchronously (the event server's 202 needs no task); what needs I/O (a heavy filter, a
label lookup, a stage that awaits) continues on tasks the ``Reporter`` owns, and a Flux Alert needs none.
With a durable queue it returns an awaitable that ends once every notification of the event is stored
(``StoreError`` propagates: the server answers 503).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence

from ..api.event import MD_TOKEN, Event
from ..core.matching import CompiledAlert
from ..core.metadata import exclude_internal_metadata
from ..errors import ControllerError
from .matcher import Matcher
from .model import Draft, Drop, DropReason, Notification, Queue, new_id
from .report import Reporter
from .stage import Runner, StageLike, name_of

log = logging.getLogger(__name__)

Waiting = list[Awaitable[Draft | None]]
Ready = list[Notification]
Later = Awaitable[list[CompiledAlert]] | None


class Dispatcher:
    def __init__(
        self, matcher: Matcher, pre_queue: Sequence[StageLike[Draft]], queue: Queue, report: Reporter
    ) -> None:
        self.matcher = matcher
        self.pre_queue = Runner(pre_queue, Draft, self._dropped, self._failed)
        self.queue = queue
        self.report = report

    def admit(self, event: Event) -> int | Awaitable[int]:
        """Memory queue: the number of Alerts matched outright; durable: an awaitable of the number stored."""
        obj = event.involved_object
        if f"{obj.group}/{MD_TOKEN}" in event.metadata:
            event = event.model_copy(
                update={"metadata": exclude_internal_metadata(event.metadata, obj.group)}
            )
        event_id = new_id() if self.report.history is not None else ""  # its records in the history share it
        matched, later = self.matcher.match(event, event_id)
        ready, waiting = self._prepare(event, matched, event_id)
        if self.queue.durable:
            return self._store(event, ready, waiting, later, event_id)
        if ready:
            self.queue.enqueue(ready)
        for pending in waiting:
            self.report.spawn(self._enqueue_later(pending))
        if later is not None:
            self.report.spawn(self._match_later(event, later, event_id))
        return len(matched)

    def _prepare(self, event: Event, matched: list[CompiledAlert], eid: str) -> tuple[Ready, Waiting]:
        ready: Ready = []
        waiting: Waiting = []
        for compiled in matched:
            outcome = self.pre_queue.run(Draft(event, compiled.alert, event_id=eid))
            if isinstance(outcome, Draft):
                ready.append(outcome.notification())
            elif outcome is not None:
                waiting.append(outcome)
        return ready, waiting

    async def _store(self, event: Event, ready: Ready, waiting: Waiting, later: Later, eid: str) -> int:
        if later is not None:
            more, more_waiting = self._prepare(event, await later, eid)
            ready += more
            waiting += more_waiting
        for pending in waiting:
            draft = await pending
            if draft is not None:
                ready.append(draft.notification())
        if ready:
            await self.queue.enqueue(ready)  # type: ignore[misc]  # a durable queue's is awaitable
        return len(ready)

    async def _enqueue_later(self, pending: Awaitable[Draft | None]) -> None:
        draft = await pending
        if draft is not None:
            await self.enqueue(draft.notification())

    async def _match_later(self, event: Event, later: Awaitable[list[CompiledAlert]], eid: str) -> None:
        """Memory queue: the Alerts matched off the loop, queued as the others."""
        ready, waiting = self._prepare(event, await later, eid)
        if ready:
            self.queue.enqueue(ready)
        for pending in waiting:
            self.report.spawn(self._enqueue_later(pending))

    async def enqueue(self, notification: Notification) -> None:
        """Queue one notification made later (a group's flush; ``StoreError`` propagates)."""
        queued = self.queue.enqueue((notification,))
        if queued is not None:
            await queued

    def _dropped(self, draft: Draft, drop: Drop) -> None:
        self.report.drop(drop, "", draft.alert, draft=draft)  # the provider type: from the draft

    def _failed(self, draft: Draft, stage: StageLike[Draft], exc: Exception) -> None:
        alert = draft.alert
        if isinstance(exc, ControllerError):
            message = f"failed to dispatch notification for {draft.event.involved_object.describe()}: {exc}"
            self.report.warn(alert, "NotificationDispatchFailed", message)
            self.report.dropped(DropReason.CONFIG, draft=draft, detail=message)
            return
        meta, debug = alert.metadata, log.isEnabledFor(logging.DEBUG)  # one broken Alert: not the others
        log.error("internal error preparing notification for alert %s/%s: %s", meta.namespace, meta.name,
                  type(exc).__name__, exc_info=debug)  # fmt: skip
        self.report.dropped(DropReason.INTERNAL, draft=draft, detail=f"internal error in {name_of(stage)}")

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Until the queue is idle and no task runs (tests, shutdown). False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            if not await self.queue.wait_idle(remaining):
                return False
            if not self.report.busy:
                if await self.queue.wait_idle(0):
                    return True
                continue
            try:
                async with asyncio.timeout(remaining):
                    await self.report.idle()
            except TimeoutError:
                return False

    async def shutdown(self, grace: float) -> int:
        """Let work in flight finish within ``grace`` seconds, then stop the queue; returns how many
        notifications were abandoned (each counted in ``notification_dropped_total{reason="shutdown"}``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        self.queue.close()  # from now on the memory lanes refuse a notification (counted as ``shutdown``)
        await self.wait_idle(grace)
        abandoned = await self.queue.shutdown(max(0.0, deadline - loop.time()))
        await self.report.cancel()
        await self.matcher.close()
        return abandoned

"""A stage in a span: what ``builder.py`` puts around every stage when tracing is on (``--otlp-endpoint``).

A span is made for a stage that *acts* — it drops, suppresses or holds the notification (a ``Drop``: Flux's
rules, the noise filter, threshold, repeat, group, Silences, mute windows, inhibition, hooks), it awaited
and changed the value (a template rendered, a thread chosen: timed until the awaitable ended), or it
raised. A stage that passes the value on records nothing, even one that had to await to decide so: the
provider lookup and the stages an event merely crosses (hooks without hooks, threads without ``threadBy``)
would otherwise be most of the spans of every trace. These are exactly the decision points the history records
(``history/recorder.py`` is called from the Reporter where a ``Drop`` is counted); the span says which
stage, the decision, the reason and its message (masked by the Redactor, bounded).

The parent is ``tracing.CURRENT`` when the stage is called: the ingest span for the pre-queue stages (the
event server sets it while the event is matched and prepared; tasks it spawns inherit it), the delivery
span for the pre-send and post-send stages (``Deliverer._deliver_traced``). With tracing off the builder
does not wrap anything: the stage lists are the same objects as before.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

from ..api.event import Event
from ..core.matching import CompiledAlert
from ..tracing import CURRENT, Span, SpanKind, Tracer
from .model import Delivery, Draft, Drop, Notification, Queue
from .stage import StageLike

T = TypeVar("T")


def _refs(value: object) -> dict[str, str | int | float | bool]:
    if isinstance(value, Delivery):
        n = value.notification
        return {"notification.alert": n.alert.key, "notification.provider": n.provider.key}
    if not isinstance(value, Draft):
        return {}
    meta = value.alert.metadata
    refs: dict[str, str | int | float | bool] = {"notification.alert": f"{meta.namespace}/{meta.name}"}
    if value.provider is not None:
        pmeta = value.provider.metadata
        refs["notification.provider"] = f"{pmeta.namespace}/{pmeta.name}"
    return refs


class TracedStage(Generic[T]):
    """``stage`` with a span when it acts (see the module docstring)."""

    __slots__ = ("kind", "mask", "name", "stage", "tracer")

    def __init__(
        self, stage: StageLike[T], kind: type[T], tracer: Tracer, mask: Callable[[str], str]
    ) -> None:
        self.stage: StageLike[T] = stage
        self.kind = kind
        self.name = stage.name
        self.tracer = tracer
        self.mask = mask

    def __call__(self, value: T, /) -> T | Drop | Awaitable[T | Drop]:
        parent = CURRENT.get()
        started = time.time_ns()
        try:
            result = self.stage(value)
        except Exception as exc:
            self._failed(value, parent, started, exc)
            raise
        if isinstance(result, Drop):
            self._decided(value, parent, started, result)
            return result
        if isinstance(result, self.kind):
            return result
        return self._awaited(value, parent, started, result)  # type: ignore[arg-type]  # as stage.Runner

    async def _awaited(
        self, value: T, parent: Span | None, started: int, pending: Awaitable[T | Drop]
    ) -> T | Drop:
        try:
            result = await pending
        except Exception as exc:
            self._failed(value, parent, started, exc)
            raise
        if isinstance(result, Drop):
            self._decided(value, parent, started, result)
        elif result is not value:  # it rendered a template, chose a thread...: timed, as it awaited
            self._span(value, parent, started, "changed").end()
        return result

    def _decided(self, value: T, parent: Span | None, started: int, drop: Drop) -> None:
        span = self._span(value, parent, started, "suppressed" if drop.suppressed else "dropped")
        span.set("notification.reason", str(drop.reason))
        if drop.message:
            span.set("notification.detail", self.mask(drop.message[:1024]))
        if drop.failure:
            span.fail(str(drop.reason))
        span.end()

    def _failed(self, value: T, parent: Span | None, started: int, exc: Exception) -> None:
        span = self._span(value, parent, started, "failed")
        span.fail(type(exc).__name__)
        span.end()

    def _span(self, value: T, parent: Span | None, started: int, decision: str) -> Span:
        attributes = _refs(value)
        attributes["notification.stage"] = self.name
        attributes["notification.decision"] = decision
        return self.tracer.start(f"stage {self.name}", parent=parent, attributes=attributes, start_ns=started)


def traced(
    stages: list[StageLike[T]], kind: type[T], tracer: Tracer, mask: Callable[[str], str]
) -> list[StageLike[T]]:
    """``stages`` (of values of type ``kind``), each in a ``TracedStage`` when ``tracer`` is enabled; the
    list itself otherwise."""
    if not tracer.enabled:
        return stages
    return [TracedStage(stage, kind, tracer, mask) for stage in stages]


class TracedQueue:
    """A ``Queue`` whose ``enqueue`` is a producer span (``enqueue memory`` / ``enqueue outbox``): the
    notifications it queues carry that span's ``traceparent`` (``Notification.traceparent``; the
    outbox stores it), so each delivery attempt is a child of it, on this replica or another, before or
    after a restart. The span of a durable queue lasts until the store has the notifications (the 202
    waits for that); its parent is ``CURRENT`` (the ingest span), or none for a notification made later
    (a group's flush, a release, a summary: a trace of its own)."""

    def __init__(self, queue: Queue, tracer: Tracer) -> None:
        self.queue = queue
        self.tracer = tracer
        self._name = "enqueue outbox" if queue.durable else "enqueue memory"

    @property
    def durable(self) -> bool:
        return self.queue.durable

    @property
    def pending(self) -> int:
        return self.queue.pending

    def enqueue(self, notifications: Sequence[Notification], /) -> Awaitable[None] | None:
        first = notifications[0] if notifications else None
        attributes: dict[str, str | int | float | bool] = {"notification.count": len(notifications)}
        if first is not None:
            attributes["notification.alert"] = first.alert.key
            attributes["notification.provider"] = first.provider.key
            attributes["notification.provider.type"] = first.provider_type
        span = self.tracer.start(
            self._name, parent=CURRENT.get(), kind=SpanKind.PRODUCER, attributes=attributes
        )
        traceparent = span.traceparent
        stamped = (
            [replace(n, traceparent=traceparent) for n in notifications] if traceparent else notifications
        )
        try:
            queued = self.queue.enqueue(stamped)
        except BaseException as exc:
            span.fail(type(exc).__name__)
            span.end()
            raise
        if queued is None:
            span.end()
            return None
        return self._stored(queued, span)

    @staticmethod
    async def _stored(queued: Awaitable[None], span: Span) -> None:
        try:
            await queued
        except BaseException as exc:  # StoreError: the event's answer is 503
            span.fail(type(exc).__name__)
            raise
        finally:
            span.end()

    def close(self) -> None:
        self.queue.close()

    async def wait_idle(self, timeout: float | None = None) -> bool:
        return await self.queue.wait_idle(timeout)

    async def shutdown(self, grace: float) -> int:
        return await self.queue.shutdown(grace)


def traced_queue(queue: Queue, tracer: Tracer) -> Queue:
    """``queue`` in a ``TracedQueue`` when ``tracer`` is enabled; ``queue`` itself otherwise."""
    return TracedQueue(queue, tracer) if tracer.enabled else queue


Matched = tuple[list[CompiledAlert], Awaitable[list[CompiledAlert]] | None]  # matcher.Matched
Match = Callable[[Event, str], Matched]


def traced_match(match: Match, tracer: Tracer) -> Match:
    """``Matcher.match`` in a span when ``tracer`` is enabled (``match``, a child of ``CURRENT``: the ingest
    span); when some Alerts are matched later (label selectors, heavy filters) the span lasts until they
    are. Off: ``match`` itself."""
    if not tracer.enabled:
        return match

    def traced(event: Event, event_id: str) -> Matched:
        span = tracer.start("match", parent=CURRENT.get())
        try:
            matched, later = match(event, event_id)
        except BaseException as exc:
            span.fail(type(exc).__name__)
            span.end()
            raise
        if later is None:
            span.set("notification.alerts.matched", len(matched))
            span.end()
            return matched, None
        return matched, _ended_after(later, span, len(matched))

    return traced


async def _ended_after(later: Awaitable[list[CompiledAlert]], span: Span, now: int) -> list[CompiledAlert]:
    try:
        matched = await later
    except BaseException as exc:
        span.fail(type(exc).__name__)
        raise
    else:
        span.set("notification.alerts.matched", now + len(matched))
        return matched
    finally:
        span.end()

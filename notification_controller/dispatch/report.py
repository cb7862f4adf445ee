"""What the pipeline tells the world: metrics, Warning Events on Alerts, and Flux's log lines.

Every notification ends delivered, failed or dropped, and each outcome is counted here (never silently):
``notification_delivered_total``, ``notification_delivery_failed_total{reason}``,
``notification_dropped_total{reason}`` (a ``DropReason``). Deliveries, failures and dead letters are also
labelled by Provider (``provider="namespace/name"``, ``ProviderSeries``): three Slack Providers can be told
apart, and a deleted Provider's series are removed (``forget_provider``). Failures and some drops also become a Warning
Event on the Alert (``NotificationDispatchFailed``, ``NotificationDropped``), with every Secret value
masked. Events are emitted on tasks owned by the reporter (``drain`` on shutdown).

One log line per outcome, with Flux's keys of the Alert (``logsetup.object_fields``: ``kind``, ``name``,
``namespace``, ``controllerKind``...) and the Provider (``provider``): a failure at error, a drop at info (a
decision: a hook's veto, a suspended Provider) or at error (``Drop.failure``: a hook that is down). Their
Events are marked as already logged (``logged=True``), so local mode — where Events go to the log — does
not print the same failure twice.

Where an outcome is counted it is also recorded in the history (issue 27, ``recording.py``), once, in its
vocabulary: ``dropped``/``suppressed`` (stage: the reason), ``delivered``; callers pass the ``Draft`` or
``Notification``. ``history`` is None with ``--history=false`` and in ``explain``: then nothing is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from prometheus_client import Counter

from ..api.alert import Alert
from ..core.redact import Redactor, mask_token
from ..history.model import Outcome
from ..history.recorder import Recorder
from ..logsetup import fields, mark_event_logged, object_fields
from ..metrics import EventMetrics, Inc, loop_counter, loop_histogram
from ..objects.base import ObjectRef
from .model import Draft, Drop, EventSink, Notification, Result
from .providerhealth import ProviderHealth
from .recording import record_draft, record_notification

log = logging.getLogger("notification_controller.dispatch.dispatcher")  # Flux's logger name for these lines

WARNING = "Warning"


def alert_fields(alert: Alert, **more: object) -> dict[str, object]:
    """Flux's keys of a log line about ``alert`` (``logsetup.object_fields``), plus ``more``."""
    meta = alert.metadata
    return object_fields("Alert", meta.namespace, meta.name, **more)


class TypeMetrics:
    """The metric children of one provider type, resolved once: ``labels()`` costs more than ``inc()``."""

    __slots__ = ("duration", "latency", "notifications")

    def __init__(self, metrics: EventMetrics, ptype: str) -> None:  # lock-free: metrics.LoopCounter
        self.notifications = loop_counter(metrics.notifications.labels(provider_type=ptype))
        self.duration = loop_histogram(metrics.delivery_duration.labels(provider_type=ptype))
        self.latency = loop_histogram(metrics.delivery_latency.labels(provider_type=ptype))


class ProviderSeries:
    """The series labelled by one Provider (``provider="namespace/name"``): created on first use, removed
    when the Provider is deleted, so the label is bounded by the Providers that exist (a churn of
    Providers leaves no series behind). Children are cached: ``labels()`` costs more than ``inc()``."""

    def __init__(self) -> None:
        self._children: dict[str, dict[tuple[Counter, tuple[str, ...]], Inc]] = {}

    def inc(self, metric: Counter, provider: str, *labelvalues: str) -> None:
        """``metric.labels(*labelvalues).inc()``, remembered under ``provider`` (one of ``labelvalues``)."""
        children = self._children.setdefault(provider, {})
        key = (metric, labelvalues)
        child = children.get(key)
        if child is None:
            child = children[key] = loop_counter(metric.labels(*labelvalues))
        child.inc()

    def forget(self, provider: str) -> int:
        """Remove every series of ``provider``; returns how many."""
        children = self._children.pop(provider, {})
        for metric, labelvalues in children:
            with contextlib.suppress(KeyError):
                metric.remove(*labelvalues)
        return len(children)

    def __len__(self) -> int:
        return sum(len(children) for children in self._children.values())


class Reporter:
    def __init__(
        self, sink: EventSink, metrics: EventMetrics, redactor: Redactor, history: Recorder | None = None
    ) -> None:
        self.sink = sink
        self.history = history
        self.metrics = metrics
        self.redactor = redactor
        self._types: dict[str, TypeMetrics] = {}  # children are never removed: safe to keep
        self.series = ProviderSeries()  # delivered, failed, dead letters: per Provider, removed with it
        self.health = ProviderHealth()  # last success / failure per Provider (the UI's overview)
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def of(self, ptype: str) -> TypeMetrics:
        children = self._types.get(ptype)
        if children is None:
            children = self._types[ptype] = TypeMetrics(self.metrics, ptype)
        return children

    def delivered(self, notification: Notification, result: Result | None = None) -> None:
        if self.history is not None:
            record_notification(self.history, Outcome.DELIVERED, notification, result=result)
        self.health.success(notification.provider.key)
        self.series.inc(
            self.metrics.delivered,
            notification.provider.key,
            notification.provider_type,
            notification.provider.key,
        )

    def dead_letter(self, metric: Counter, ptype: str, provider: str, reason: str) -> None:
        """``notification_dead_letters_total`` (``DeliveryMetrics``, durable stores) of ``provider``."""
        self.series.inc(metric, provider, ptype, provider, reason)

    def forget_provider(self, namespace: str, name: str) -> None:
        """The Provider was deleted: its ``provider``-labelled series go with it."""
        self.series.forget(f"{namespace}/{name}")
        self.health.forget(f"{namespace}/{name}")

    def dropped(
        self,
        reason: str,
        ptype: str = "",
        n: int = 1,
        *,
        draft: Draft | None = None,
        notification: Notification | None = None,
        detail: str = "",
    ) -> None:
        self.metrics.dropped.labels(provider_type=ptype, reason=reason).inc(n)
        if self.history is not None:
            if notification is not None:
                self.record(Outcome.DROPPED, notification, stage=str(reason), detail=detail)
            elif draft is not None:
                record_draft(self.history, Outcome.DROPPED, draft, str(reason), detail)

    def drop(
        self,
        drop: Drop,
        ptype: str,
        alert: Alert | None = None,
        *,
        draft: Draft | None = None,
        notification: Notification | None = None,
    ) -> None:
        if not ptype and draft is not None and draft.provider is not None:
            ptype = str(draft.provider.spec.type)
        if self.history is not None:
            outcome = Outcome.SUPPRESSED if drop.suppressed else Outcome.DROPPED
            if notification is not None:
                self.record(outcome, notification, stage=str(drop.reason), detail=drop.message)
            elif draft is not None:
                record_draft(self.history, outcome, draft, str(drop.reason), drop.message)
        if drop.suppressed:  # noise control did its job: counted, visible at debug level
            self.metrics.suppressed.labels(reason=drop.reason).inc()
            if log.isEnabledFor(logging.DEBUG) and alert is not None:
                meta = alert.metadata
                log.debug(
                    "suppressed (%s) by alert %s/%s: %s", drop.reason, meta.namespace, meta.name, drop.message
                )
            return
        self.dropped(drop.reason, ptype or drop.provider_type)
        if drop.message:
            keys = alert_fields(alert, reason=str(drop.reason)) if alert is not None else {}
            log.log(logging.ERROR if drop.failure else logging.INFO, "%s", drop.message, extra=fields(**keys))
        if drop.warn and alert is not None:
            self.warn(
                alert, "NotificationDropped", drop.message or str(drop.reason), logged=bool(drop.message)
            )

    def failed(
        self,
        notification: Notification,
        alert: Alert,
        error: str,
        reason: str,
        masks: Sequence[str] = (),
    ) -> str:
        """Count, log (Flux's level and keys) and event a failed delivery; return the masked error."""
        provider = notification.provider.key
        self.series.inc(self.metrics.failed, provider, notification.provider_type, provider, reason)
        for secret in masks:
            error = mask_token(error, secret)
        error = self.redactor(error)
        self.health.failure(provider, error)
        obj = notification.event.involved_object
        message = f"failed to send notification for {obj.describe()}: {error}"
        meta = alert.metadata
        log.error(
            "%s (alert %s/%s, provider %s)",
            message,
            meta.namespace,
            meta.name,
            notification.provider.name,
            extra=fields(**alert_fields(alert, error=error, provider=notification.provider.key)),
        )
        self.warn(alert, "NotificationDispatchFailed", message, logged=True)
        return error

    # ---- the history (recording.py) ----------------------------------------------------------------------
    def record(
        self,
        outcome: Outcome,
        n: Notification,
        *,
        stage: str = "",
        detail: str = "",
        result: Result | None = None,
        attempt: int | None = None,
    ) -> None:
        if self.history is not None:
            record_notification(
                self.history, outcome, n, stage=stage, detail=detail, result=result, attempt=attempt
            )

    def warn(
        self,
        alert: Alert,
        reason: str,
        message: str,
        annotations: dict[str, str] | None = None,
        *,
        logged: bool = False,
    ) -> None:
        """A Warning Event on the Alert; ``logged``: the caller already logged this (see the module
        docstring)."""
        self.event(ObjectRef.of(alert), WARNING, reason, message, annotations, logged=logged)

    def event(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        annotations: dict[str, str] | None = None,
        *,
        logged: bool = False,
    ) -> None:
        """A Kubernetes Event on ``ref`` (secrets masked), emitted on an owned task."""
        self.spawn(self._emit(ref, type_, reason, self.redactor(message), annotations, logged))

    async def _emit(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        annotations: dict[str, str] | None,
        logged: bool = False,
    ) -> None:
        if logged:
            mark_event_logged()  # this task's own context: the local cluster logs the Event at debug
        try:
            await self.sink.event(ref, type_, reason, message, annotations)
        except Exception as exc:
            log.warning(
                "could not record event %s on %s/%s: %s", reason, ref.namespace, ref.name, type(exc).__name__
            )

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("dispatcher task failed: %s", type(task.exception()).__name__)

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    async def idle(self) -> None:
        await self._idle.wait()

    async def cancel(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

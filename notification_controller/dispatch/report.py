"""What the pipeline tells the world: metrics, Warning Events on Alerts, and Flux's log lines.

Every notification ends delivered, failed or dropped, and each outcome is counted here (never silently):
``notification_delivered_total``, ``notification_delivery_failed_total{reason}``,
``notification_dropped_total{reason}`` (a ``DropReason``). Failures and some drops also become a Warning
Event on the Alert (``NotificationDispatchFailed``, ``NotificationDropped``), with every Secret value
masked. Events are emitted on tasks owned by the reporter (``drain`` on shutdown).

One log line per outcome, with Flux's keys of the Alert (``logsetup.object_fields``: ``kind``, ``name``,
``namespace``, ``controllerKind``...) and the Provider (``provider``): a failure at error, a drop at info (a
decision: a hook's veto, a suspended Provider) or at error (``Drop.failure``: a hook that is down). Their
Events are marked as already logged (``logged=True``), so local mode — where Events go to the log — does
not print the same failure twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from ..api.alert import Alert
from ..core.redact import Redactor, mask_token
from ..logsetup import fields, mark_event_logged, object_fields
from ..metrics import EventMetrics
from ..store.base import ObjectRef
from .model import Drop, EventSink, Notification

log = logging.getLogger("notification_controller.dispatch.dispatcher")  # Flux's logger name for these lines

WARNING = "Warning"


def alert_fields(alert: Alert, **more: object) -> dict[str, object]:
    """Flux's keys of a log line about ``alert`` (``logsetup.object_fields``), plus ``more``."""
    meta = alert.metadata
    return object_fields("Alert", meta.namespace, meta.name, **more)


class TypeMetrics:
    """The metric children of one provider type, resolved once: ``labels()`` costs more than ``inc()``."""

    __slots__ = ("delivered", "duration", "notifications")

    def __init__(self, metrics: EventMetrics, ptype: str) -> None:
        self.notifications = metrics.notifications.labels(provider_type=ptype)
        self.delivered = metrics.delivered.labels(provider_type=ptype)
        self.duration = metrics.delivery_duration.labels(provider_type=ptype)


class Reporter:
    def __init__(self, sink: EventSink, metrics: EventMetrics, redactor: Redactor) -> None:
        self.sink = sink
        self.metrics = metrics
        self.redactor = redactor
        self._types: dict[str, TypeMetrics] = {}  # children are never removed: safe to keep
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def of(self, ptype: str) -> TypeMetrics:
        children = self._types.get(ptype)
        if children is None:
            children = self._types[ptype] = TypeMetrics(self.metrics, ptype)
        return children

    def dropped(self, reason: str, ptype: str = "", n: int = 1) -> None:
        self.metrics.dropped.labels(provider_type=ptype, reason=reason).inc(n)

    def drop(self, drop: Drop, ptype: str, alert: Alert | None = None) -> None:
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
        self.metrics.failed.labels(provider_type=notification.provider_type, reason=reason).inc()
        for secret in masks:
            error = mask_token(error, secret)
        error = self.redactor(error)
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

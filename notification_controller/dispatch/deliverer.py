"""The second half of the pipeline: one queued notification → resolve, pre-send stages, send, post-send
stages, report.

A notification is resolved at send time against the *current* Alert and Provider (they may have changed
since it was queued; deleted or suspended ones stop it) and the Provider's cached notifier
(``notifiers.py``). ``deliver`` makes one attempt and says what it came to (``Result``): the memory lanes
stop there (Flux: at most once), the durable outbox retries or dead-letters from it. It never raises
except ``CancelledError``.

With the history on (``Reporter.history``), each attempt is timed and the outbound path writes what was sent
into an ``AttemptLog`` (``outbound.ATTEMPT_LOG``): the ``Result`` carries the latency, the provider's status
code and the masked request summary, and whoever decides what the attempt came to records it — ``delivered``
here, ``failed`` by ``send`` (the memory lanes give up), ``retrying``/``dead_lettered`` by the outbox.

With tracing on (``--otlp-endpoint``, ``tracing/``), ``deliver`` is ``_deliver_traced``: each attempt is a
client span, a child of the span that queued the notification (``Notification.traceparent``, stored with it
in the outbox), with the provider type, the Alert and Provider (``namespace/name``), the attempt, the outcome,
the provider's status code and the failure reason; the pre-send stages that act are its children, and the
requests of a notifier that ``propagates_trace`` (generic, generic-hmac, cloudevents) carry its
``traceparent``. Off, ``deliver`` is ``_deliver`` itself: no call, no check on the way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import Protocol

from ..api.alert import Alert
from ..errors import ControllerError, DeliveryError, PermanentDeliveryError, RetryableDeliveryError
from ..history.model import Outcome
from ..objects.base import ObjectStore
from ..outbound import ATTEMPT_LOG, IDEMPOTENCY_KEY, TRACEPARENT, AttemptLog, OutboundHTTP
from ..outbound.identity import WorkloadIdentity
from ..outbound.tokens import TokenCache
from ..providers.base import DeliveryContext
from ..tracing import CURRENT, NOOP, SpanKind, Tracer
from .model import DELIVERED, GONE, Delivery, DeliveryOutcome, Drop, DropReason, Notification, Result
from .notifiers import NotifierCache
from .report import Reporter
from .stage import Runner, StageLike, name_of

log = logging.getLogger(__name__)

MAX_CACHED_CONTEXTS = 4096


class Deliver(Protocol):
    """``Deliverer.deliver``: one attempt (``idempotency_key``: sent as ``Idempotency-Key``)."""

    def __call__(self, notification: Notification, *, idempotency_key: str = "") -> Awaitable[Result]: ...


class Deliverer:
    def __init__(
        self,
        store: ObjectStore,
        notifiers: NotifierCache,
        report: Reporter,
        http: OutboundHTTP,
        identity: WorkloadIdentity,
        tokens: TokenCache | None,
        *,
        pre_send: Sequence[StageLike[Delivery]] = (),
        post_send: Sequence[StageLike[Delivery]] = (),
        tracer: Tracer = NOOP,
    ) -> None:
        self.store = store
        self.notifiers = notifiers
        self.report = report
        self.http = http
        self.identity = identity
        self.tokens = tokens
        self.pre_send = Runner(pre_send, Delivery, self._dropped, self._failed)
        self.post_send = Runner(post_send, Delivery, lambda delivery, drop: None, self._after_failed)
        self._contexts: dict[tuple[str, str], DeliveryContext] = {}  # per Alert: ``_context``
        self.tracer = tracer
        self.tracing = tracer.enabled
        self.deliver: Deliver = self._deliver_traced if tracer.enabled else self._deliver

    def _dropped(self, delivery: Delivery, drop: Drop) -> None:
        self.report.drop(drop, delivery.provider_type, delivery.alert, notification=delivery.notification)

    def _failed(self, delivery: Delivery, stage: StageLike[Delivery], exc: Exception) -> None:
        log.error(
            "pipeline stage %s failed; dropping notification",
            name_of(stage),
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        self.report.dropped(
            DropReason.STAGE_ERROR,
            delivery.provider_type,
            notification=delivery.notification,
            detail=f"pipeline stage {name_of(stage)} failed: {type(exc).__name__}",
        )

    @staticmethod
    def _after_failed(delivery: Delivery, stage: StageLike[Delivery], exc: Exception) -> None:
        log.error("post-send stage %s failed: %s", name_of(stage), type(exc).__name__)  # delivered already

    async def send(self, notification: Notification, queued_at: float) -> None:
        """The memory lanes' delivery: one attempt (Flux), its outcome counted."""
        try:
            result = await self.deliver(notification)
            if result.outcome is DeliveryOutcome.RETRY or result.outcome is DeliveryOutcome.PERMANENT:
                self.report.record(Outcome.FAILED, notification, result=result)  # no other attempt follows
        finally:
            self.report.of(notification.provider_type).duration.observe(time.monotonic() - queued_at)

    def resolve(self, n: Notification) -> Delivery | Drop:
        """The notification against the current Alert and Provider."""
        alert = self.store.alert(n.alert.namespace, n.alert.name)
        provider = self.store.provider(n.provider.namespace, n.provider.name)
        if alert is None or provider is None:
            gone = f"alert {n.alert.key}" if alert is None else f"provider {n.provider.key}"
            return Drop(
                DropReason.GONE,
                f"notification for {n.event.involved_object.describe()} not sent: {gone} was deleted",
            )
        if provider.spec.suspend:
            return Drop(DropReason.SUSPENDED)
        try:
            options, notifier = self.notifiers.get(provider)
        except ControllerError as exc:
            message = f"failed to dispatch notification for {n.event.involved_object.describe()}: {exc}"
            self.report.warn(alert, "NotificationDispatchFailed", message)
            return Drop(DropReason.CONFIG)
        return Delivery(n, n.event, alert, provider, options, notifier, message=n.message)

    async def _deliver_traced(self, notification: Notification, *, idempotency_key: str = "") -> Result:
        """``_deliver`` in a client span (see the module docstring)."""
        n = notification
        span = self.tracer.start(
            f"deliver {n.provider_type}",
            parent=n.traceparent or None,
            kind=SpanKind.CLIENT,
            attributes={
                "notification.provider.type": n.provider_type,
                "notification.alert": n.alert.key,
                "notification.provider": n.provider.key,
                "notification.attempt": max(n.attempt, 1),
                "notification.id": n.id,
            },
        )
        token = CURRENT.set(span)
        try:
            result = await self._deliver(n, idempotency_key=idempotency_key)
        except BaseException as exc:  # cancelled (shutdown): the attempt did not end
            span.fail("cancelled" if isinstance(exc, asyncio.CancelledError) else "internal")
            span.end()
            raise
        finally:
            CURRENT.reset(token)
        span.set("notification.outcome", result.outcome.value)
        if result.status_code is not None:
            span.set("http.response.status_code", result.status_code)
        if result.outcome is DeliveryOutcome.RETRY or result.outcome is DeliveryOutcome.PERMANENT:
            span.fail(result.reason or "internal")
            if result.error:
                span.set("notification.error", result.error)  # masked by the Reporter, as in the logs
        span.end()
        return result

    async def _deliver(self, notification: Notification, *, idempotency_key: str = "") -> Result:
        """Resolve, run the pre-send stages and send once; count and report the outcome.
        ``idempotency_key``: sent as ``Idempotency-Key`` by HTTP providers."""
        ptype = notification.provider_type
        resolved = self.resolve(notification)
        if isinstance(resolved, Drop):
            self.report.drop(resolved, ptype, notification=notification)
            return GONE
        delivery = await self.pre_send.finish(resolved) if self.pre_send.stages else resolved
        if delivery is None:
            return GONE
        ctx = self._context(delivery.alert, delivery.notification.commit_status)  # a stage may set it
        if (
            delivery.message is not None
            or delivery.thread is not None
            or delivery.body is not None
            or delivery.edit is not None
        ):
            ctx = dataclasses.replace(
                ctx,
                message=delivery.message,
                thread=delivery.thread,
                body=delivery.body,
                templated=delivery.templated,
                edit=delivery.edit,
            )
        attempt = AttemptLog() if self.report.history is not None or self.tracing else None
        propagate = self.tracing and getattr(delivery.notifier, "propagates_trace", False)
        started = time.perf_counter()
        try:
            if idempotency_key or attempt is not None:
                key = IDEMPOTENCY_KEY.set(idempotency_key) if idempotency_key else None
                logged = ATTEMPT_LOG.set(attempt) if attempt is not None else None
                span = CURRENT.get() if propagate else None
                traced = TRACEPARENT.set(span.traceparent) if span is not None else None
                try:
                    await delivery.notifier.post(delivery.event, ctx)
                finally:
                    if traced is not None:
                        TRACEPARENT.reset(traced)
                    if logged is not None:
                        ATTEMPT_LOG.reset(logged)
                    if key is not None:
                        IDEMPOTENCY_KEY.reset(key)
            else:
                await delivery.notifier.post(delivery.event, ctx)
        except DeliveryError as exc:
            error = self.report.failed(
                notification, delivery.alert, str(exc), exc.reason, delivery.options.masks()
            )
            outcome = (
                DeliveryOutcome.PERMANENT
                if isinstance(exc, PermanentDeliveryError)
                else DeliveryOutcome.RETRY
            )
            retry_after = exc.retry_after if isinstance(exc, RetryableDeliveryError) else None
            if attempt is None:
                return Result(outcome, error, retry_after)
            status = exc.status if exc.status else attempt.status
            return _attempted(outcome, error, retry_after, exc.reason, status, started, attempt)
        except Exception as exc:  # a notifier bug must not kill the lane
            error = self.report.failed(
                notification, delivery.alert, f"internal error: {type(exc).__name__}", "internal"
            )
            log.error(
                "notifier %s raised %s", ptype, type(exc).__name__, exc_info=log.isEnabledFor(logging.DEBUG)
            )
            if attempt is None:
                return Result(DeliveryOutcome.RETRY, error)
            return _attempted(
                DeliveryOutcome.RETRY, error, None, "internal", attempt.status, started, attempt
            )
        if notification.received_at:  # event received -> delivered (docs/monitoring.md); 0.0: an older row
            latency = time.time() - notification.received_at  # wall clock: received maybe on another replica
            self.report.of(notification.provider_type).latency.observe(latency if latency > 0.0 else 0.0)
        done = DELIVERED
        if attempt is None:
            self.report.delivered(notification)
        else:
            done = _attempted(DeliveryOutcome.DELIVERED, "", None, "", attempt.status, started, attempt)
            self.report.delivered(notification, done)
        if self.post_send.stages:  # delivered already: the outcome stands
            after = self.post_send.run(delivery)  # synchronous stages: no coroutine
            if after is not None and not isinstance(after, Delivery):
                await after
        return done

    def _context(self, alert: Alert, commit_status: str) -> DeliveryContext:
        """One immutable context per Alert version, not one per delivery (a commit status gets a copy)."""
        key = (alert.metadata.namespace, alert.metadata.name)
        ctx = self._contexts.get(key)
        if ctx is None or ctx.alert is not alert:
            if len(self._contexts) >= MAX_CACHED_CONTEXTS:  # deleted Alerts must not accumulate
                self._contexts.clear()
            ctx = self._contexts[key] = DeliveryContext(
                http=self.http, alert=alert, tokens=self.tokens, identity=self.identity
            )
        return dataclasses.replace(ctx, commit_status=commit_status) if commit_status else ctx


def _attempted(
    outcome: DeliveryOutcome,
    error: str,
    retry_after: float | None,
    reason: str,
    status: int | None,
    started: float,
    attempt: AttemptLog,
) -> Result:
    """A ``Result`` with what the history shows of the attempt (the latency in whole microseconds:
    ``round(x, 3)`` formats and parses the float, ~1,000 instructions a delivery)."""
    latency_ms = round((time.perf_counter() - started) * 1_000_000) / 1000
    return Result(outcome, error, retry_after, reason, status, latency_ms, attempt.summary())

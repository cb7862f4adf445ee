"""The orchestrator: match an event to Alerts, run the pre-queue stages, queue, resolve, pre-send, send.

::

    event ─> match (sources, severity, inclusion/exclusion; labels and heavy filters later: labels.py,
             filtering.py)
          ─> per matched Alert: pre-queue stages (Flux's rules: rules.py; then any added stage)
          ─> queue: this process's lanes (lanes.py, memory store) or the durable outbox (durable.py)
          ─> per notification, at send time: resolve the current Alert/Provider and its cached notifier
             (notifiers.py) ─> pre-send stages (hooks, templates) ─> notifier.post ─> report.py

Semantics with the ``memory`` store are Flux's at-most-once: the HTTP 202 never waits for delivery; a failed
delivery is logged, counted and evented on the Alert, never re-queued. With a durable store (``outbox``
set), ``admit`` returns only once the event's notifications are stored, and the outbox retries them.

Stages are lists filled at composition time (``app.py``): adding one never touches this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..api.alert import Alert
from ..api.event import MD_TOKEN, Event
from ..core.matching import CompiledAlert, SourceMatch, encode_message
from ..core.metadata import exclude_internal_metadata
from ..core.redact import Redactor
from ..errors import ControllerError, DeliveryError, PermanentDeliveryError, RetryableDeliveryError
from ..metrics import EventMetrics
from ..outbound import IDEMPOTENCY_KEY, OutboundHTTP
from ..outbound.identity import WorkloadIdentity
from ..outbound.tokens import TokenCache
from ..providers.base import DeliveryContext
from ..sandbox import SandboxPool
from ..settings import EventSettings, KubeSettings, Settings
from ..store.base import Cluster, ObjectStore
from .durable import DELIVERED, Outcome, Result
from .filtering import FilterOffload
from .labels import LabelCache, LookupResult
from .lanes import LaneSettings, MemoryLanes
from .model import (
    Delivery,
    Draft,
    Drop,
    DropReason,
    EventSink,
    Notification,
    PostSendStage,
    PreQueueStage,
    PreSendStage,
    describe,
)
from .notifiers import NotifierCache
from .report import Reporter
from .rules import flux_rules

log = logging.getLogger(__name__)

MAX_CACHED_CONTEXTS = 4096
_GONE = Result(Outcome.DROPPED)


@dataclass(frozen=True)
class DispatchSettings:
    """Defaults and help live in ``settings.py``."""

    no_cross_namespace_refs: bool = EventSettings.no_cross_namespace_refs
    max_pending: int = EventSettings.max_pending
    provider_concurrency: int = EventSettings.provider_concurrency
    object_level_workload_identity: bool = False  # the ObjectLevelWorkloadIdentity feature gate
    default_service_account: str = KubeSettings.default_service_account  # outbound/identity.py
    workload_identity_custom_endpoints: bool = KubeSettings.workload_identity_custom_endpoints

    @classmethod
    def of(cls, s: Settings) -> DispatchSettings:
        e = s.events
        return cls(
            e.no_cross_namespace_refs,
            e.max_pending,
            e.provider_concurrency,
            s.gate("ObjectLevelWorkloadIdentity"),
            s.kube.default_service_account,
            s.kube.workload_identity_custom_endpoints,
        )


class Outbox(Protocol):
    """Where notifications go instead of the lanes when the store is durable (``outbox.py``)."""

    async def put(self, notifications: Sequence[Notification]) -> None: ...


Candidates = list[tuple[CompiledAlert, SourceMatch]]


class Dispatcher:
    def __init__(
        self,
        store: ObjectStore,
        cluster: Cluster,
        http: OutboundHTTP,
        sink: EventSink,
        metrics: EventMetrics,
        settings: DispatchSettings | None = None,
        *,
        pre_queue: Sequence[PreQueueStage] = (),
        pre_send: Sequence[PreSendStage] = (),
        post_send: Sequence[PostSendStage] = (),
        redactor: Redactor | None = None,
        tokens: TokenCache | None = None,
        labels: LabelCache | None = None,
        sandbox: SandboxPool | None = None,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.http = http
        self.metrics = metrics
        self.settings = s = settings or DispatchSettings()
        self.redactor = redactor or Redactor()
        self.report = Reporter(sink, metrics, self.redactor)
        self.tokens = tokens
        self.labels = labels if labels is not None else LabelCache(cluster, metrics)  # for matchLabels
        self.identity = WorkloadIdentity(  # cloud workload identity: ServiceAccount tokens, metadata caches
            cluster,
            object_level=s.object_level_workload_identity,
            default_service_account=s.default_service_account,
            custom_endpoints=s.workload_identity_custom_endpoints,
        )
        self.notifiers = NotifierCache(store)
        self.rules = flux_rules(
            store,
            self.notifiers,
            self.report.warn,
            no_cross_namespace_refs=s.no_cross_namespace_refs,
            object_level_workload_identity=s.object_level_workload_identity,
            sandbox=sandbox,  # commitStatusExpr beyond the inline-safe subset (issue 23)
            deferred=lambda: self.outbox is not None,  # durable: at send time (rules.CommitStatusAtSend)
        )
        self.pre_queue: list[PreQueueStage] = [*self.rules, *pre_queue]
        self.pre_send: list[PreSendStage] = list(pre_send)
        self.post_send: list[PostSendStage] = list(post_send)
        self.lanes = MemoryLanes(
            LaneSettings(max_pending=s.max_pending, concurrency=s.provider_concurrency),
            self.report,
            self._send,
        )
        self.outbox: Outbox | None = None
        self.filters = FilterOffload()  # heavy message filters run off the loop (filtering.py)
        self._contexts: dict[tuple[str, str], DeliveryContext] = {}  # per Alert: ``_context``

    # ---- state -------------------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return self.lanes.pending

    @property
    def accepting(self) -> bool:
        return self.lanes.accepting

    def invalidate(self, namespace: str, name: str) -> None:
        self.notifiers.invalidate(namespace, name)

    # ---- ingest --------------------------------------------------------------------------------------------
    async def admit(self, event: Event) -> int:
        """The event server's entry. Memory store: as ``submit``. Durable store: match completely (label
        lookups and heavy filters included), run the pre-queue stages, and return once every notification
        of the event is stored; ``StoreError`` propagates (the server answers 503)."""
        if self.outbox is None:
            return self.submit(event)
        event = self._strip(event)
        candidates = self._candidates(event)
        allowed = await self._allowed(event, candidates)
        if allowed is None:
            return 0
        matched, need_labels = self._split(candidates, allowed)
        if need_labels:
            matched += await self._match_labels(event, need_labels)
        self._count_unmatched(event, matched, need_labels)
        notifications: list[Notification] = []
        for compiled in matched:
            outcome = self._pre_queue(Draft(event, compiled.alert))
            draft = await outcome if inspect.isawaitable(outcome) else outcome
            if draft is not None:
                notifications.append(draft.notification())
        if notifications:
            await self.outbox.put(notifications)
            for n in notifications:
                self.report.of(n.provider_type).notifications.inc()
        return len(notifications)

    def submit(self, event: Event) -> int:
        """Memory store: match and queue now; returns how many Alerts matched outright (label checks and
        message filters too heavy for the loop continue on tasks). Cheap and synchronous for the common
        case, so the event server answers 202 immediately."""
        event = self._strip(event)
        candidates = self._candidates(event)
        message = event.message
        size = len(message) if message.isascii() else 4 * len(message)  # UTF-8 bytes, at most
        cost = sum(compiled.filter_cost(size) for compiled, _ in candidates)
        if self.filters.inline(cost):  # cost 0: no valid expression anywhere, the text is not looked at
            return self._hand_off(
                event, candidates, self._message_allowed(candidates, message if cost else "")
            )
        if self._refuse_filters(event, candidates, size):
            return 0
        self.report.spawn(self._filter_then_hand_off(event, candidates, size))
        return 0

    @staticmethod
    def _strip(event: Event) -> Event:
        obj = event.involved_object
        if f"{obj.group}/{MD_TOKEN}" in event.metadata:
            return event.model_copy(update={"metadata": exclude_internal_metadata(event.metadata, obj.group)})
        return event

    def _candidates(self, event: Event) -> Candidates:
        obj = event.involved_object
        candidates: Candidates = []
        for compiled in self.store.alerts_for(obj.namespace, obj.kind, obj.name):
            if compiled.alert.spec.suspend:
                continue
            result = compiled.match_sources(event)
            if result is SourceMatch.NO:
                continue
            if compiled.refused is not None:  # over its bounds: Ready=False says why; count, deliver nothing
                self._drop_for(compiled, DropReason.CONFIG)
                log.debug("alert %s/%s refused: %s", compiled.namespace, compiled.name, compiled.refused)
                continue
            for expr in compiled.invalid_inclusion:
                self.report.warn(
                    compiled.alert, "InvalidConfig", f"failed to compile inclusion regex: {expr}"
                )
            for expr in compiled.invalid_exclusion:
                self.report.warn(
                    compiled.alert, "InvalidConfig", f"failed to compile exclusion regex: {expr}"
                )
            candidates.append((compiled, result))
        return candidates

    def _message_allowed(self, candidates: Candidates, message: str) -> list[bool]:
        """Inclusion/exclusion of each candidate (pure: runs on the loop or on the filter thread)."""
        text = encode_message(message)
        return [compiled.message_allowed(text) for compiled, _ in candidates]

    def _refuse_filters(self, event: Event, candidates: Candidates, size: int) -> bool:
        if self.filters.admit(size):
            return False
        for compiled, _ in candidates:
            self._drop_for(compiled, DropReason.OVERLOAD)
        log.warning(
            "dropping event for %s: %d events wait for their message filters (heavy inclusion/exclusion lists)",
            event.involved_object.describe(),
            self.filters.backlog,
        )
        return True

    async def _allowed(self, event: Event, candidates: Candidates) -> list[bool] | None:
        message = event.message
        size = len(message) if message.isascii() else 4 * len(message)
        cost = sum(compiled.filter_cost(size) for compiled, _ in candidates)
        if self.filters.inline(cost):
            return self._message_allowed(candidates, message if cost else "")
        if self._refuse_filters(event, candidates, size):
            return None
        return await self._filter_in_worker(event, candidates, size)

    async def _filter_in_worker(self, event: Event, candidates: Candidates, size: int) -> list[bool] | None:
        text = encode_message(event.message)  # once; the worker runs one Alert's lists at a time
        checks = [functools.partial(compiled.message_allowed, text) for compiled, _ in candidates]
        try:
            return await self.filters.run(checks, size)
        except asyncio.CancelledError:  # shutdown: these notifications will not be made; say so
            for compiled, _ in candidates:
                self._drop_for(compiled, DropReason.SHUTDOWN)
            raise
        except Exception as exc:
            log.error(
                "message filters failed for %s: %s", event.involved_object.describe(), type(exc).__name__
            )
            for compiled, _ in candidates:
                self._drop_for(compiled, DropReason.INTERNAL)
            return None

    async def _filter_then_hand_off(self, event: Event, candidates: Candidates, size: int) -> None:
        allowed = await self._filter_in_worker(event, candidates, size)
        if allowed is not None:
            self._hand_off(event, candidates, allowed)

    @staticmethod
    def _split(
        candidates: Candidates, allowed: list[bool]
    ) -> tuple[list[CompiledAlert], list[CompiledAlert]]:
        matched: list[CompiledAlert] = []
        need_labels: list[CompiledAlert] = []
        for (compiled, result), ok in zip(candidates, allowed, strict=True):
            if ok:
                (matched if result is SourceMatch.YES else need_labels).append(compiled)
        return matched, need_labels

    def _count_unmatched(
        self, event: Event, matched: list[CompiledAlert], need_labels: list[CompiledAlert]
    ) -> None:
        if not matched and not need_labels:
            self.metrics.events_unmatched.inc()
            log.debug(
                "discarding event, no alerts found for the involved object %s",
                event.involved_object.describe(),
            )

    def _hand_off(self, event: Event, candidates: Candidates, allowed: list[bool]) -> int:
        matched, need_labels = self._split(candidates, allowed)
        for compiled in matched:
            self._queue(event, compiled)
        if need_labels:
            self.report.spawn(self._labels_then_queue(event, need_labels))
        self._count_unmatched(event, matched, need_labels)
        return len(matched)

    def _drop_for(self, compiled: CompiledAlert, reason: DropReason | str) -> None:
        provider = self.store.provider(compiled.namespace, compiled.alert.spec.provider_ref.name)
        self.report.dropped(reason, str(provider.spec.type) if provider is not None else "")

    async def _match_labels(self, event: Event, candidates: list[CompiledAlert]) -> list[CompiledAlert]:
        """The label-selected candidates whose selector matches the involved object's labels (cached,
        budgeted: ``labels.py``). When the labels cannot be read, each candidate is counted as dropped
        (``label_lookup*``)."""
        obj = event.involved_object
        lookup = await self.labels.lookup(obj.api_version, obj.kind, obj.namespace, obj.name)
        if lookup.labels is None:
            for compiled in candidates:
                self._drop_for(compiled, lookup.drop_reason)
                if lookup.result is not LookupResult.REJECTED:  # Flux's Warning; never echo a bad reference
                    self.report.warn(
                        compiled.alert, "SourceFetchFailed", f"error getting source object {obj.describe()}"
                    )
            return []
        matched = [compiled for compiled in candidates if compiled.match_labels(event, lookup.labels)]
        if not matched:
            self.metrics.events_unmatched.inc()
        return matched

    async def _labels_then_queue(self, event: Event, candidates: list[CompiledAlert]) -> None:
        for compiled in await self._match_labels(event, candidates):
            self._queue(event, compiled)

    async def enqueue(self, notification: Notification) -> None:
        """Queue a notification a stage made later (a group's): the lanes, or the outbox (``StoreError``
        propagates: the caller tries again)."""
        if self.outbox is None:
            self.lanes.put(notification)
            return
        await self.outbox.put([notification])
        self.report.of(notification.provider_type).notifications.inc()

    # ---- pre-queue ---------------------------------------------------------------------------------------
    def _queue(self, event: Event, compiled: CompiledAlert) -> None:
        outcome = self._pre_queue(Draft(event, compiled.alert))
        if outcome is None:
            return
        if isinstance(outcome, Draft):  # the common case first: ``isawaitable`` costs more
            self.lanes.put(outcome.notification())
        else:
            self.report.spawn(self._queue_later(outcome))

    async def _queue_later(self, outcome: Awaitable[Draft | None]) -> None:
        draft = await outcome
        if draft is not None:
            self.lanes.put(draft.notification())

    def _pre_queue(self, draft: Draft, start: int = 0) -> Draft | Awaitable[Draft | None] | None:
        """Run the pre-queue stages from ``start``: the draft to queue, None (dropped and counted), or an
        awaitable of either once a stage needed I/O."""
        stages = self.pre_queue
        for i in range(start, len(stages)):
            stage = stages[i]
            try:
                result = stage(draft)
            except Exception as exc:
                self._pre_queue_failed(draft, exc)
                return None
            if isinstance(result, Draft):
                draft = result
            elif isinstance(result, Drop):
                self.report.drop(result, str(draft.provider.spec.type) if draft.provider else "", draft.alert)
                return None
            else:
                return self._pre_queue_async(draft, result, i + 1)
        return draft

    async def _pre_queue_async(
        self, draft: Draft, pending: Awaitable[Draft | Drop], start: int
    ) -> Draft | None:
        try:
            result = await pending
        except Exception as exc:
            self._pre_queue_failed(draft, exc)
            return None
        if isinstance(result, Drop):
            self.report.drop(result, str(draft.provider.spec.type) if draft.provider else "", draft.alert)
            return None
        outcome = self._pre_queue(result, start)
        return await outcome if inspect.isawaitable(outcome) else outcome

    def _pre_queue_failed(self, draft: Draft, exc: Exception) -> None:
        alert = draft.alert
        if isinstance(exc, ControllerError):
            message = f"failed to dispatch notification for {draft.event.involved_object.describe()}: {exc}"
            self.report.warn(alert, "NotificationDispatchFailed", message)
            self.report.dropped(DropReason.CONFIG)
            return
        # one broken Alert/Provider must not affect the others or the 202
        log.error(
            "internal error preparing notification for alert %s/%s: %s",
            alert.metadata.namespace,
            alert.metadata.name,
            type(exc).__name__,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )
        self.report.dropped(DropReason.INTERNAL)

    # ---- send ----------------------------------------------------------------------------------------------
    async def _send(self, notification: Notification, queued_at: float) -> None:
        """The memory lanes' delivery: one attempt (Flux), its outcome counted."""
        try:
            await self.deliver(notification)
        finally:
            self.report.of(notification.provider_type).duration.observe(time.monotonic() - queued_at)

    def _resolve(self, n: Notification) -> Delivery | Drop:
        """The notification against the current Alert and Provider (they may have changed since it was
        queued: the current ones are used; deleted or suspended ones stop it)."""
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

    async def deliver(self, notification: Notification, *, idempotency_key: str = "") -> Result:
        """Resolve, run the pre-send stages and send once; count and report the outcome. Never raises
        except ``CancelledError``. ``idempotency_key``: sent as ``Idempotency-Key`` by HTTP providers."""
        ptype = notification.provider_type
        resolved = self._resolve(notification)
        if isinstance(resolved, Drop):
            self.report.drop(resolved, ptype)
            return _GONE
        delivery = resolved
        for stage in self.pre_send:
            try:
                result = await stage(delivery)
            except Exception:
                log.exception("pipeline stage %s failed; dropping notification", describe(stage))
                self.report.dropped(DropReason.STAGE_ERROR, ptype)
                return _GONE
            if isinstance(result, Drop):
                self.report.drop(result, ptype, delivery.alert)
                return _GONE
            delivery = result
        ctx = self._context(delivery.alert, delivery.notification.commit_status)  # a stage may set it
        if delivery.message is not None or delivery.thread is not None or delivery.body is not None:
            ctx = dataclasses.replace(
                ctx,
                message=delivery.message,
                thread=delivery.thread,
                body=delivery.body,
                templated=delivery.templated,
            )
        try:
            if idempotency_key:
                token = IDEMPOTENCY_KEY.set(idempotency_key)
                try:
                    await delivery.notifier.post(delivery.event, ctx)
                finally:
                    IDEMPOTENCY_KEY.reset(token)
            else:
                await delivery.notifier.post(delivery.event, ctx)
        except DeliveryError as exc:
            error = self.report.failed(
                notification, delivery.alert, str(exc), exc.reason, delivery.options.masks()
            )
            if isinstance(exc, PermanentDeliveryError):
                return Result(Outcome.PERMANENT, error)
            retry_after = exc.retry_after if isinstance(exc, RetryableDeliveryError) else None
            return Result(Outcome.RETRY, error, retry_after)
        except Exception as exc:  # a notifier bug must not kill the lane
            error = self.report.failed(
                notification, delivery.alert, f"internal error: {type(exc).__name__}", "internal"
            )
            log.error(
                "notifier %s raised %s", ptype, type(exc).__name__, exc_info=log.isEnabledFor(logging.DEBUG)
            )
            return Result(Outcome.RETRY, error)
        self.report.of(ptype).delivered.inc()
        for after in self.post_send:
            try:
                await after(delivery)
            except Exception as exc:  # delivered already: the outcome stands
                log.error("post-send stage %s failed: %s", describe(after), type(exc).__name__)
        return DELIVERED

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

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending and no task runs (tests, shutdown). False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            if not await self.lanes.wait_idle(remaining):
                return False
            if not self.report.busy:
                if not self.lanes.pending:
                    return True
                continue
            try:
                async with asyncio.timeout(remaining):
                    await self.report.idle()
            except TimeoutError:
                return False

    async def shutdown(self, grace: float) -> int:
        """Stop accepting, let in-flight deliveries finish within ``grace`` seconds, then cancel the rest.

        Returns how many notifications were abandoned (queued or in flight); each is counted once in
        ``notification_dropped_total{reason="shutdown"}``, so every notification handed to a lane ends up
        delivered, failed or dropped.
        """
        self.lanes.close()  # from now on a notification is refused (counted as ``shutdown``)
        await self.wait_idle(grace)
        abandoned = await self.lanes.shutdown(0.0)
        await self.report.cancel()
        self.filters.close()  # the filter thread stops after the expression list it is on (filtering.py)
        await self.labels.close()
        if abandoned:
            log.warning(
                "shutdown abandoned %d notifications (%d queued, %d in flight)",
                abandoned,
                abandoned - self.lanes.interrupted,
                self.lanes.interrupted,
            )
        return abandoned

"""Match an event to Alerts, prepare one notification per Alert, and deliver it (reference §3.4–3.6).

Semantics are Flux's at-most-once: the HTTP 202 never waits for delivery, a failed delivery is logged,
counted and evented on the Alert, never re-queued. Beyond Flux:
* delivery goes through bounded per-Provider lanes (``provider_concurrency`` workers each) and a global
  cap on pending notifications (``max_pending``); what the cap refuses is counted in
  ``notification_dropped_total{reason="overload"}``, never silent;
* notifiers (options, TLS contexts) are built once per Provider/Secret version, not per event;
* so are, on the hot path, the metric children of a provider type and the delivery context of an Alert;
* shutdown drains in-flight deliveries within a deadline and counts what it had to abandon.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..api.alert import Alert
from ..api.common import Secret
from ..api.event import (
    EVENT_ANNOTATION_PREFIX,
    MD_CHANGE_REQUEST,
    MD_COMMIT,
    MD_COMMIT_STATUS,
    MD_COMMIT_STATUS_UPDATE,
    MD_TOKEN,
    SEVERITY_ERROR,
    Event,
)
from ..api.provider import CHANGE_REQUEST_TYPES, COMMIT_STATUS_TYPES, GENERIC_TYPES, Provider
from ..core.matching import CompiledAlert, SourceMatch, encode_message
from ..core.metadata import combine_metadata, exclude_internal_metadata
from ..core.redact import Redactor, mask_token
from ..errors import ControllerError, DeliveryError
from ..logsetup import fields
from ..metrics import EventMetrics
from ..providers.base import DeliveryContext, Notifier, ProviderOptions
from ..providers.http import OutboundHTTP
from ..providers.identity import WorkloadIdentity
from ..providers.options import resolve_options
from ..providers.registry import create_notifier
from ..providers.tokens import TokenCache
from ..store.base import Cluster, ObjectRef, ObjectStore
from .filtering import FilterOffload
from .labels import LabelCache, LookupResult
from .model import Drop, EventSink, Notification, Stage

log = logging.getLogger(__name__)

WARNING = "Warning"
MAX_CACHED_CONTEXTS = 4096


@dataclass(frozen=True)
class DispatchSettings:
    no_cross_namespace_refs: bool = False
    max_pending: int = 10_000
    provider_concurrency: int = 16
    object_level_workload_identity: bool = False
    default_service_account: str = ""  # --default-service-account (providers/identity.py)


class _Lane:
    __slots__ = ("queue", "workers")

    def __init__(self) -> None:
        self.queue: deque[tuple[Notification, float]] = deque()
        self.workers = 0


_NO_SECRETS: tuple[None, None, None] = (None, None, None)


class _TypeMetrics:
    """The metric children of one provider type, resolved once: ``labels()`` costs more than ``inc()``."""

    __slots__ = ("delivered", "duration", "notifications")

    def __init__(self, metrics: EventMetrics, ptype: str) -> None:
        self.notifications = metrics.notifications.labels(provider_type=ptype)
        self.delivered = metrics.delivered.labels(provider_type=ptype)
        self.duration = metrics.delivery_duration.labels(provider_type=ptype)


@dataclass
class _CachedNotifier:
    provider: Provider
    secrets: tuple[Secret | None, ...]
    options: ProviderOptions
    notifier: Notifier


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
        stages: Sequence[Stage] = (),
        redactor: Redactor | None = None,
        tokens: TokenCache | None = None,
        labels: LabelCache | None = None,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.http = http
        self.sink = sink
        self.metrics = metrics
        self.settings = settings or DispatchSettings()
        self.stages: list[Stage] = list(stages)
        self.redactor = redactor or Redactor()
        self.tokens = tokens
        self.labels = labels if labels is not None else LabelCache(cluster, metrics)  # for matchLabels
        self.identity = WorkloadIdentity(  # cloud workload identity: ServiceAccount tokens, metadata caches
            cluster,
            object_level=self.settings.object_level_workload_identity,
            default_service_account=self.settings.default_service_account,
        )
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._pending = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._notifiers: dict[tuple[str, str], _CachedNotifier] = {}
        self._contexts: dict[tuple[str, str], DeliveryContext] = {}  # per Alert: ``_context_for``
        self._type_metrics: dict[str, _TypeMetrics] = {}  # children are never removed: safe to keep
        self._accepting = True
        self._interrupted = 0  # in-flight deliveries cancelled by shutdown
        self.filters = FilterOffload()  # heavy message filters run off the loop (filtering.py)

    # ---- ingest --------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return self._pending

    @property
    def accepting(self) -> bool:
        return self._accepting

    def submit(self, event: Event) -> int:
        """Match and hand off an event; returns how many Alerts matched outright (label checks run later, and
        so do message filters too heavy for the loop: ``filtering.py``).

        Cheap and synchronous for the common case, so the event server answers 202 immediately.
        """
        obj = event.involved_object
        if f"{obj.group}/{MD_TOKEN}" in event.metadata:
            event = event.model_copy(
                update={"metadata": exclude_internal_metadata(event.metadata, obj.group)}
            )
        candidates: list[tuple[CompiledAlert, SourceMatch]] = []
        for compiled in self.store.alerts_for(obj.namespace, obj.kind, obj.name):
            if compiled.alert.spec.suspend:
                continue
            result = compiled.match_sources(event)
            if result is SourceMatch.NO:
                continue
            if compiled.refused is not None:  # over its bounds: Ready=False says why; count, deliver nothing
                self._drop_for(compiled, "config")
                log.debug("alert %s/%s refused: %s", compiled.namespace, compiled.name, compiled.refused)
                continue
            self._warn_invalid_filters(compiled)
            candidates.append((compiled, result))
        message = event.message
        size = len(message) if message.isascii() else 4 * len(message)  # UTF-8 bytes, at most
        cost = sum(compiled.filter_cost(size) for compiled, _ in candidates)
        if self.filters.inline(cost):  # cost 0: no valid expression anywhere, the text is not looked at
            return self._hand_off(
                event, candidates, self._message_allowed(candidates, message if cost else "")
            )
        if not self.filters.admit(size):
            for compiled, _ in candidates:
                self._drop_for(compiled, "overload")
            log.warning(
                "dropping event for %s: %d events wait for their message filters (heavy inclusion/exclusion "
                "lists)",
                obj.describe(),
                self.filters.backlog,
            )
            return 0
        self._spawn(self._filter_in_worker(event, candidates, size))
        return 0

    def _message_allowed(
        self, candidates: list[tuple[CompiledAlert, SourceMatch]], message: str
    ) -> list[bool]:
        """Inclusion/exclusion of each candidate (pure: runs on the loop or on the filter thread)."""
        text = encode_message(message)
        return [compiled.message_allowed(text) for compiled, _ in candidates]

    def _warn_invalid_filters(self, compiled: CompiledAlert) -> None:
        for expr in compiled.invalid_inclusion:
            self._warn(compiled.alert, "InvalidConfig", f"failed to compile inclusion regex: {expr}")
        for expr in compiled.invalid_exclusion:
            self._warn(compiled.alert, "InvalidConfig", f"failed to compile exclusion regex: {expr}")

    async def _filter_in_worker(
        self, event: Event, candidates: list[tuple[CompiledAlert, SourceMatch]], size: int
    ) -> None:
        text = encode_message(event.message)  # once; the worker runs one Alert's lists at a time
        checks = [functools.partial(compiled.message_allowed, text) for compiled, _ in candidates]
        try:
            allowed = await self.filters.run(checks, size)
        except asyncio.CancelledError:  # shutdown: these notifications will not be made; say so
            for compiled, _ in candidates:
                self._drop_for(compiled, "shutdown")
            raise
        except Exception as exc:
            log.error(
                "message filters failed for %s: %s", event.involved_object.describe(), type(exc).__name__
            )
            for compiled, _ in candidates:
                self._drop_for(compiled, "internal")
            return
        self._hand_off(event, candidates, allowed)

    def _hand_off(
        self, event: Event, candidates: list[tuple[CompiledAlert, SourceMatch]], allowed: list[bool]
    ) -> int:
        matched: list[CompiledAlert] = []
        need_labels: list[CompiledAlert] = []
        for (compiled, result), ok in zip(candidates, allowed, strict=True):
            if ok:
                (matched if result is SourceMatch.YES else need_labels).append(compiled)
        for compiled in matched:
            self._prepare_and_enqueue(event, compiled)
        if need_labels:
            self._spawn(self._match_labels(event, need_labels))
        if not matched and not need_labels:
            self.metrics.events_unmatched.inc()
            log.debug(
                "discarding event, no alerts found for the involved object %s",
                event.involved_object.describe(),
            )
        return len(matched)

    def _drop_for(self, compiled: CompiledAlert, reason: str) -> None:
        provider = self.store.provider(compiled.namespace, compiled.alert.spec.provider_ref.name)
        ptype = str(provider.spec.type) if provider is not None else ""
        self.metrics.dropped.labels(provider_type=ptype, reason=reason).inc()

    async def _match_labels(self, event: Event, candidates: list[CompiledAlert]) -> None:
        """Match label-selected sources on the involved object's labels (cached, budgeted: ``labels.py``).

        A notification that cannot be matched because the labels could not be read is counted in
        ``notification_dropped_total`` (``label_lookup*`` reasons), one per candidate Alert.
        """
        obj = event.involved_object
        lookup = await self.labels.lookup(obj.api_version, obj.kind, obj.namespace, obj.name)
        if lookup.labels is None:
            for compiled in candidates:
                provider = self.store.provider(compiled.namespace, compiled.alert.spec.provider_ref.name)
                ptype = str(provider.spec.type) if provider is not None else ""
                self.metrics.dropped.labels(provider_type=ptype, reason=lookup.drop_reason).inc()
                if lookup.result is not LookupResult.REJECTED:  # Flux's Warning; never echo a bad reference
                    self._warn(
                        compiled.alert, "SourceFetchFailed", f"error getting source object {obj.describe()}"
                    )
            return
        matched = False
        for compiled in candidates:
            if compiled.match_labels(event, lookup.labels):
                matched = True
                self._prepare_and_enqueue(event, compiled)
        if not matched:
            self.metrics.events_unmatched.inc()

    # ---- preparation (reference §3.6) ---------------------------------------------------------
    def _prepare_and_enqueue(self, event: Event, compiled: CompiledAlert) -> None:
        alert = compiled.alert
        try:
            result = self.prepare(event, alert)
        except ControllerError as exc:
            message = f"failed to dispatch notification for {event.involved_object.describe()}: {exc}"
            self._warn(alert, "NotificationDispatchFailed", message)
            self.metrics.dropped.labels(provider_type="", reason="config").inc()
            return
        except Exception as exc:  # one broken Alert/Provider must not affect the others or the 202
            log.error(
                "internal error preparing notification for alert %s/%s: %s",
                alert.metadata.namespace,
                alert.metadata.name,
                type(exc).__name__,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            self.metrics.dropped.labels(provider_type="", reason="internal").inc()
            return
        if isinstance(result, Drop):
            self._count_drop(result, result.provider_type)
            return
        self._enqueue(result)

    def prepare(self, event: Event, alert: Alert) -> Notification | Drop:
        """Turn (event, alert) into a ready-to-send notification, or a Drop. Raises ControllerError."""
        obj = event.involved_object
        ns = alert.metadata.namespace
        if self.settings.no_cross_namespace_refs and obj.namespace != ns:
            raise ControllerError(
                f"discarding event, access denied to cross-namespace sources: alert '{ns}/{alert.metadata.name}' "
                f"can't process event from '{obj.describe()}', cross-namespace references have been blocked"
            )
        provider = self.store.provider(ns, alert.spec.provider_ref.name)
        if provider is None:
            raise ControllerError(
                f"failed to read provider: Provider '{ns}/{alert.spec.provider_ref.name}' not found"
            )
        ptype = provider.spec.type
        if provider.spec.suspend:
            return Drop("suspended", provider_type=ptype)
        group = obj.group
        md = event.metadata
        commit_status_update = md.get(f"{group}/{MD_COMMIT_STATUS}") == MD_COMMIT_STATUS_UPDATE
        if commit_status_update and ptype not in COMMIT_STATUS_TYPES and ptype not in GENERIC_TYPES:
            return Drop("commit_status_update", provider_type=ptype)
        if (
            ptype in COMMIT_STATUS_TYPES
            and not md.get(EVENT_ANNOTATION_PREFIX + MD_COMMIT)
            and not commit_status_update
            and event.severity != SEVERITY_ERROR
        ):
            return Drop(
                "commit_status",
                "event dropped for commit status providers due to missing commit metadata key",
                provider_type=ptype,
            )
        if ptype in CHANGE_REQUEST_TYPES and not md.get(EVENT_ANNOTATION_PREFIX + MD_CHANGE_REQUEST):
            return Drop(
                "change_request",
                "event dropped due to missing change request metadata key",
                provider_type=ptype,
            )
        if provider.spec.service_account_name and not self.settings.object_level_workload_identity:
            raise ControllerError(
                "to use spec.serviceAccountName for provider authentication please enable the "
                "ObjectLevelWorkloadIdentity feature gate in the controller"
            )
        combined = combine_metadata(md, group, alert.spec.event_metadata, alert.spec.summary)
        if combined.conflicts:
            self._warn(
                alert,
                "MetadataAppendFailed",
                "metadata key conflicts detected (please refer to the Alert API docs and Flux RFC 0008 for more "
                "information)",
                {k: ", ".join(v) for k, v in combined.conflicts.items()},
            )
        if combined.metadata:
            event = event.model_copy(update={"metadata": combined.metadata})
        options, notifier = self._notifier_for(provider)
        if ptype in COMMIT_STATUS_TYPES:
            status_id = self._commit_status_id(event, alert, provider)
            options = dataclasses.replace(options, commit_status=status_id)
            notifier = self._build(provider, options)
        return Notification(event, alert, provider, options, notifier)

    def _commit_status_id(self, event: Event, alert: Alert, provider: Provider) -> str:
        expr = provider.spec.commit_status_expr
        if not expr:
            obj = event.involved_object
            uid_head = provider.metadata.uid.split("-", 1)[0]
            return f"{obj.kind}/{obj.name}/{uid_head}".lower()
        from ..core.cel import CELError, OutputType, compile_expression

        try:
            program = compile_expression(
                expr, variables=("event", "alert", "provider"), output=OutputType.STRING, strict_types=True
            )
            return program.evaluate_string(
                {
                    "event": event.as_cel(),
                    "alert": alert.model_dump(by_alias=True, mode="json"),
                    "provider": provider.model_dump(by_alias=True, mode="json"),
                }
            )
        except CELError as exc:
            raise ControllerError(
                "failed to create commit status: failed to evaluate the spec.commitStatusExpr CEL expression "
                f"for the event: {exc}"
            ) from exc

    def _referenced_secrets(self, provider: Provider) -> tuple[Secret | None, ...]:
        spec, ns = provider.spec, provider.metadata.namespace
        refs = (spec.secret_ref, spec.cert_secret_ref, spec.proxy_secret_ref)
        if refs[0] is None and refs[1] is None and refs[2] is None:  # nothing to look up per event
            return _NO_SECRETS
        return tuple(self.store.secret(ns, r.name) if r else None for r in refs)

    def _notifier_for(self, provider: Provider) -> tuple[ProviderOptions, Notifier]:
        key = (provider.metadata.namespace, provider.metadata.name)
        secrets = self._referenced_secrets(provider)
        cached = self._notifiers.get(key)
        if (
            cached is not None
            and cached.provider is provider
            and all(a is b for a, b in zip(cached.secrets, secrets, strict=True))
        ):
            return cached.options, cached.notifier
        options = resolve_options(provider, self.store.secret)
        notifier = self._build(provider, options)
        self._notifiers[key] = _CachedNotifier(provider, secrets, options, notifier)
        return options, notifier

    def _build(self, provider: Provider, options: ProviderOptions) -> Notifier:
        try:
            return create_notifier(options)
        except ControllerError as exc:
            raise ControllerError(
                f"failed to initialize notifier for provider '{provider.metadata.name}': {exc}"
            ) from exc

    # ---- delivery --------------------------------------------------------------------------------
    def _enqueue(self, notification: Notification) -> None:
        ptype = notification.provider_type
        if not self._accepting:
            self.metrics.dropped.labels(provider_type=ptype, reason="shutdown").inc()
            return
        if self._pending >= self.settings.max_pending:
            self.metrics.dropped.labels(provider_type=ptype, reason="overload").inc()
            log.warning(
                "dropping notification for %s: %d notifications pending (limit %d)",
                notification.event.involved_object.describe(),
                self._pending,
                self.settings.max_pending,
            )
            return
        key = (notification.provider.metadata.namespace, notification.provider.metadata.name)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.queue.append((notification, time.monotonic()))
        self._pending += 1
        self.metrics.pending.set(self._pending)
        self._metrics_for(ptype).notifications.inc()
        if lane.workers < self.settings.provider_concurrency:
            lane.workers += 1
            self._spawn(self._worker(key, lane))

    def _metrics_for(self, ptype: str) -> _TypeMetrics:
        children = self._type_metrics.get(ptype)
        if children is None:
            children = self._type_metrics[ptype] = _TypeMetrics(self.metrics, ptype)
        return children

    async def _worker(self, key: tuple[str, str], lane: _Lane) -> None:
        try:
            while lane.queue:
                notification, queued_at = lane.queue.popleft()
                try:
                    await self._deliver(notification, queued_at)
                except asyncio.CancelledError:
                    if not self._accepting:  # cut off by shutdown after the grace period: count it
                        self._interrupted += 1
                        self.metrics.dropped.labels(
                            provider_type=notification.provider_type, reason="shutdown"
                        ).inc()
                    raise
                finally:
                    self._pending -= 1
                    self.metrics.pending.set(self._pending)
        finally:
            lane.workers -= 1
            if lane.workers == 0 and not lane.queue and self._lanes.get(key) is lane:
                del self._lanes[key]

    async def _deliver(self, notification: Notification, queued_at: float) -> None:
        ptype = notification.provider_type
        for stage in self.stages:
            try:
                result = await stage(notification)
            except Exception:
                log.exception(
                    "pipeline stage %s failed; dropping notification", getattr(stage, "name", stage)
                )
                self.metrics.dropped.labels(provider_type=ptype, reason="stage_error").inc()
                return
            if isinstance(result, Drop):
                self._count_drop(result, ptype)
                if result.warn:
                    self._warn(notification.alert, "NotificationDropped", result.message or result.reason)
                return
            notification = result
        ctx = self._context_for(notification.alert)
        try:
            await notification.notifier.post(notification.event, ctx)
        except DeliveryError as exc:
            self.metrics.failed.labels(provider_type=ptype, reason=exc.reason).inc()
            self._delivery_failed(notification, str(exc))
        except Exception as exc:  # a notifier bug must not kill the lane
            self.metrics.failed.labels(provider_type=ptype, reason="internal").inc()
            self._delivery_failed(notification, f"internal error: {type(exc).__name__}")
            log.error(
                "notifier %s raised %s", ptype, type(exc).__name__, exc_info=log.isEnabledFor(logging.DEBUG)
            )
        else:
            self._metrics_for(ptype).delivered.inc()
        finally:
            self._metrics_for(ptype).duration.observe(time.monotonic() - queued_at)

    def _context_for(self, alert: Alert) -> DeliveryContext:
        """One immutable context per Alert version, not one per delivery."""
        key = (alert.metadata.namespace, alert.metadata.name)
        ctx = self._contexts.get(key)
        if ctx is None or ctx.alert is not alert:
            if len(self._contexts) >= MAX_CACHED_CONTEXTS:  # deleted Alerts must not accumulate
                self._contexts.clear()
            ctx = self._contexts[key] = DeliveryContext(
                http=self.http, alert=alert, tokens=self.tokens, identity=self.identity
            )
        return ctx

    def _delivery_failed(self, notification: Notification, error: str) -> None:
        for secret in notification.options.masks():
            error = mask_token(error, secret)
        error = self.redactor(error)
        obj = notification.event.involved_object
        message = f"failed to send notification for {obj.describe()}: {error}"
        alert = notification.alert.metadata
        log.error(  # Flux's level and keys for a failed delivery
            "%s (alert %s/%s, provider %s)",
            message,
            alert.namespace,
            alert.name,
            notification.provider.metadata.name,
            extra=fields(
                name=alert.name,
                namespace=alert.namespace,
                error=error,
                provider=notification.provider.metadata.name,
                **{"reconciler kind": "Alert"},
            ),
        )
        self._warn(notification.alert, "NotificationDispatchFailed", message)

    def _count_drop(self, drop: Drop, ptype: str) -> None:
        self.metrics.dropped.labels(provider_type=ptype, reason=drop.reason).inc()
        if drop.message:
            log.info("%s", drop.message)

    # ---- events and tasks -----------------------------------------------------------------------
    def _warn(
        self, alert: Alert, reason: str, message: str, annotations: dict[str, str] | None = None
    ) -> None:
        message = self.redactor(message)
        self._spawn(self._emit(ObjectRef.of(alert), reason, message, annotations))

    async def _emit(
        self, ref: ObjectRef, reason: str, message: str, annotations: dict[str, str] | None
    ) -> None:
        try:
            await self.sink.emit(ref, WARNING, reason, message, annotations)
        except Exception as exc:
            log.warning(
                "could not record event %s on %s/%s: %s", reason, ref.namespace, ref.name, type(exc).__name__
            )

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("dispatcher task failed: %s", type(task.exception()).__name__)

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending and no task runs (tests, shutdown). False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._pending or any(not t.done() for t in self._tasks):
            if deadline is not None and loop.time() >= deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    async def shutdown(self, grace: float) -> int:
        """Stop accepting, let in-flight deliveries finish within ``grace`` seconds, then cancel the rest.

        Returns how many notifications were abandoned: those still queued and those whose delivery was
        still in flight when the grace period ended; each is counted once in
        ``notification_dropped_total{reason="shutdown"}``, so every notification handed to a lane ends up
        delivered, failed or dropped.
        """
        self._accepting = False
        await self.wait_idle(grace)
        queued = 0
        for lane in self._lanes.values():
            while lane.queue:
                notification, _ = lane.queue.popleft()
                self.metrics.dropped.labels(provider_type=notification.provider_type, reason="shutdown").inc()
                queued += 1
        self._pending -= queued
        self.metrics.pending.set(self._pending)
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.filters.close()  # the filter thread stops after the expression list it is on (filtering.py)
        await self.labels.close()
        abandoned = queued + self._interrupted
        if abandoned:
            log.warning(
                "shutdown abandoned %d notifications (%d queued, %d in flight)",
                abandoned,
                queued,
                self._interrupted,
            )
        return abandoned

    def invalidate(self, namespace: str, name: str) -> None:
        self._notifiers.pop((namespace, name), None)


NotifierFactory = Callable[[ProviderOptions], Notifier]

"""Runs the Receiver, Provider, Alert and Silence reconcilers against the store, in either mode.

``ControllerManager`` is the controller-runtime manager of this process, reduced to what it needs:

* one ``WorkQueue`` per kind with ``concurrent`` workers (Flux: ``--concurrent``, 4) and per-key
  exponential backoff (``--min-retry-delay`` 750ms → ``--max-retry-delay`` 15m);
* store changes → keys: each reconciler maps a ``Change`` to the keys of its kind to reconcile (its own
  objects when spec/metadata change, Providers and Receivers when a Secret they read changes, Alerts
  when their Provider changes);
* after ``store.wait_synced()`` every object is enqueued once, then every ``resync_interval`` (10m);
* a reconcile never takes the loop down: an exception is logged, counted
  (``notification_reconcile_errors_total{kind,name,namespace}``) and retried with backoff, and the other
  keys keep flowing (checklist D9, D12);
* ``gotk_reconcile_duration_seconds{kind,name,namespace}`` is observed per reconcile; its series and the
  object's error count are deleted with the object;
* controller-runtime's ``controller_runtime_*`` and client-go's ``workqueue_*`` metrics (``controller`` and
  ``name`` = the lowercase kind), as every Flux controller exports them (see ``metrics.py``);
* with ``hooks`` (Hooks API v1, docs/hooks.md) every reconciler calls the ``pre-reconcile`` hooks before
  writing status and the ``finalize`` hooks before releasing a deleted object.

The same code runs in Kubernetes mode and local mode: only the ``Cluster`` given differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from ..core.redact import Redactor
from ..errors import ControllerError
from ..hooks.reconcile import ReconcileHooks
from ..lib.clock import Clock
from ..logsetup import fields, log_context, object_fields
from ..objects.base import Change, Cluster, Key, ObjectStore
from ..settings import EventSettings, KubeSettings, SilenceSettings
from .alert import AlertReconciler
from .base import Reconciler, Result
from .events import EventRecorder
from .metrics import CompactHistogram, ControllerRuntimeMetrics, WorkQueueMetrics
from .provider import ProviderReconciler
from .queue import LoopBudget, WorkQueue
from .receiver import ReceiverReconciler
from .silence import SilenceReconciler

log = logging.getLogger(__name__)

KINDS = ("Provider", "Alert", "Receiver", "Silence")


def exponential_buckets_range(minimum: float, maximum: float, count: int) -> list[float]:
    """Prometheus Go client's ``ExponentialBucketsRange`` (same iterative multiplication)."""
    if count < 1 or minimum <= 0 or maximum <= minimum:
        raise ValueError("need count >= 1 and 0 < minimum < maximum")
    if count == 1:
        return [minimum]
    factor = (maximum / minimum) ** (1.0 / (count - 1))
    buckets: list[float] = []
    value = minimum
    for _ in range(count):
        buckets.append(value)
        value *= factor
    return buckets


RECONCILE_BUCKETS = exponential_buckets_range(0.01, 1800, 10)
START_CHUNK = 500
"""Keys indexed or enqueued between two checks of the loop budget when the controllers start (~2 ms)."""


class ReconcileMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = CompactHistogram(
            "gotk_reconcile_duration_seconds",
            "The duration in seconds of a GitOps Toolkit resource reconciliation.",
            RECONCILE_BUCKETS,
        )
        registry.register(self.duration)
        self.errors = Counter(
            "notification_reconcile_errors",
            "Reconciles that failed (returned an error or raised), per object.",
            ["kind", "name", "namespace"],
            registry=registry,
        )
        self.runtime = ControllerRuntimeMetrics(registry)
        self.workqueue = WorkQueueMetrics(registry)

    def error(self, kind: str, namespace: str, name: str) -> None:
        self.errors.labels(kind, name, namespace).inc()

    def forget(self, kind: str, namespace: str, name: str) -> None:
        self.duration.remove(kind, name, namespace)
        self.errors.remove(kind, name, namespace)


class ControllerManager:
    """Owns the queues, workers and resync timer of the four reconcilers (see the module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        cluster: Cluster,
        clock: Clock,
        kube: KubeSettings | None = None,
        *,
        no_cross_namespace_refs: bool = EventSettings.no_cross_namespace_refs,
        registry: CollectorRegistry | None = None,
        redactor: Redactor | None = None,
        recorder: EventRecorder | None = None,
        hooks: ReconcileHooks | None = None,
        silences: SilenceSettings | None = None,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.clock = clock
        self.kube = kube or KubeSettings()  # --concurrent, --*-retry-delay, --resync-interval: read directly
        self.redactor = redactor if redactor is not None else Redactor()
        self.metrics = ReconcileMetrics(registry if registry is not None else CollectorRegistry())
        self.recorder = recorder if recorder is not None else EventRecorder(cluster, clock, self.redactor)
        self.reconcilers: dict[str, Reconciler[Any]] = {
            "Provider": ProviderReconciler(
                store, cluster, self.recorder, clock, redactor=self.redactor, hooks=hooks
            ),
            "Alert": AlertReconciler(
                store,
                cluster,
                self.recorder,
                clock,
                redactor=self.redactor,
                no_cross_namespace_refs=no_cross_namespace_refs,
                hooks=hooks,
            ),
            "Receiver": ReceiverReconciler(
                store, cluster, self.recorder, clock, redactor=self.redactor, hooks=hooks
            ),
            "Silence": SilenceReconciler(
                store,
                cluster,
                self.recorder,
                clock,
                redactor=self.redactor,
                retention=(silences or SilenceSettings()).retention,
                cluster_namespace=(silences or SilenceSettings()).cluster_namespace,
            ),
        }
        for kind in ("Alert", "Provider"):
            self.reconcilers[kind].writes_status = self.kube.alert_provider_status
        self.budget = LoopBudget()  # one for every worker of the four queues (see LoopBudget)
        self.queues: dict[str, WorkQueue[Key]] = {
            kind: WorkQueue(
                kind,
                min_retry_delay=self.kube.min_retry_delay,
                max_retry_delay=self.kube.max_retry_delay,
                metrics=self.metrics.workqueue.for_queue(kind.lower()),
                budget=self.budget,
            )
            for kind in KINDS
        }
        for kind in KINDS:
            self.metrics.runtime.init_controller(kind.lower(), self.kube.concurrent)
        self.reconciles: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self._running = False

    def request(self, kind: str, key: Key) -> None:
        """Reconcile ``key`` soon (something outside the store changed what its status should say)."""
        self.queues[kind].add(key)

    def set_hooks(self, hooks: ReconcileHooks | None) -> None:
        """Give every reconciler the Hooks API v1 phases (``pre-reconcile``, ``finalize``); before ``run``."""
        for reconciler in self.reconcilers.values():
            reconciler.hooks = hooks

    # ---- lifecycle --------------------------------------------------------------------------------
    async def run(self) -> None:
        """Reconcile until cancelled or ``stop``ped."""
        if self._running:
            raise RuntimeError("ControllerManager.run() is already running")
        self._running = True
        unsubscribe = self.store.subscribe(self._on_change)
        try:
            if not await self._wait_synced():
                return
            await self._start_all()
            log.info("controllers started (%d workers per kind)", self.kube.concurrent)
            async with asyncio.TaskGroup() as group:
                for kind, queue in self.queues.items():
                    group.create_task(
                        queue.run(self._handler(kind), workers=self.kube.concurrent),
                        name=f"controller-{kind}",
                    )
                group.create_task(self._resync_loop(), name="controller-resync")
        finally:
            unsubscribe()
            self._running = False
            self._stopped.set()

    async def _wait_synced(self) -> bool:
        """Wait for the store's first sync; False if ``stop`` came first."""
        synced = asyncio.ensure_future(self.store.wait_synced())
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({synced, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (synced, stopping):
                task.cancel()
            await asyncio.gather(synced, stopping, return_exceptions=True)
        return self.store.synced and not self._stopping.is_set()

    async def stop(self, deadline: float = 10.0) -> bool:
        """Stop taking work, let in-flight reconciles finish within ``deadline`` seconds, then cancel.

        Returns True if every in-flight reconcile finished in time.
        """
        self._stopping.set()
        results = await asyncio.gather(*(queue.shutdown(deadline) for queue in self.queues.values()))
        if self._running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), deadline)
        return all(results)

    # ---- enqueueing -------------------------------------------------------------------------------
    def enqueue_all(self) -> None:
        for kind, reconciler in self.reconcilers.items():
            for key in reconciler.object_keys():
                self.queues[kind].add(key)

    async def _start_all(self) -> None:
        """Index the objects already in the store, then enqueue every one, ``START_CHUNK`` keys at a time
        within the workers' ``LoopBudget``: 10,000 Alerts take ~0.1 s, which held ``/readyz`` in one go."""
        for reconciler in self.reconcilers.values():
            keys = reconciler.object_keys()
            for start in range(0, len(keys), START_CHUNK):
                reconciler.prime(keys[start : start + START_CHUNK])
                await self.budget.pace()
        await self._enqueue_all_paced()

    async def _enqueue_all_paced(self) -> None:
        """``enqueue_all``, ``START_CHUNK`` keys at a time within the workers' ``LoopBudget``."""
        for kind, reconciler in self.reconcilers.items():
            keys = reconciler.object_keys()
            for start in range(0, len(keys), START_CHUNK):
                for key in keys[start : start + START_CHUNK]:
                    self.queues[kind].add(key)
                await self.budget.pace()

    def _on_change(self, change: Change) -> None:
        for kind, reconciler in self.reconcilers.items():
            for key in reconciler.watch(change):
                self.queues[kind].add(key)

    async def _resync_loop(self) -> None:
        interval = self.kube.resync_interval
        if interval <= 0:
            return
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)
            if not self._stopping.is_set():
                log.debug("periodic resync: enqueueing every object")
                await self._enqueue_all_paced()

    # ---- processing -------------------------------------------------------------------------------
    def _handler(self, kind: str) -> Callable[[Key], Awaitable[None]]:
        async def handle(key: Key) -> None:
            await self.process(kind, key)

        return handle

    async def process(self, kind: str, key: Key) -> Result | None:
        """Reconcile one key and schedule what comes next. Never raises (except cancellation)."""
        queue = self.queues[kind]
        reconciler = self.reconcilers[kind]
        exists = self.store.get(kind, *key) is not None
        controller = kind.lower()
        outcome = "error"
        panic = False
        start = self.clock.monotonic()
        self.reconciles[kind] += 1
        self.metrics.runtime.active_workers.labels(controller).inc()
        try:
            with log_context(kind, key[0], key[1]):  # every line of this reconcile: Flux's keys, reconcileID
                result = await reconciler.reconcile(key)
            outcome = _outcome(result)
        except asyncio.CancelledError:
            outcome = ""
            raise
        except Exception as exc:
            panic = not isinstance(exc, ControllerError)
            self.metrics.error(kind, *key)
            delay = queue.add_rate_limited(key)
            # An API error is expected operation (logged without traceback); anything else is a bug. Both are
            # errors in Flux's terms (no warning level), with its structured keys.
            error = self.redactor(str(exc))
            log.error(
                "Reconciler error: %s %s/%s: %s; retrying in %.3gs",
                kind,
                key[0],
                key[1],
                error,
                delay,
                exc_info=not isinstance(exc, ControllerError),
                extra=fields(**object_fields(kind, key[0], key[1], error=error)),
            )
            return None
        finally:
            elapsed = self.clock.monotonic() - start
            self.metrics.runtime.active_workers.labels(controller).dec()
            if outcome:
                self.metrics.runtime.observe(controller, outcome, elapsed, panic=panic)
            if exists:
                self.metrics.duration.observe(kind, key[1], key[0], elapsed)
        if not exists or self.store.get(kind, *key) is None:
            queue.forget(key)
            queue.cancel_delayed(key)
            self.metrics.forget(kind, *key)
            return result
        if result.error is not None:
            self.metrics.error(kind, *key)
            queue.add_rate_limited(key)
        elif result.requeue:
            queue.add_rate_limited(key)
        else:
            queue.forget(key)
            if result.requeue_after is not None:
                queue.add_after(key, result.requeue_after)
        return result


def _outcome(result: Result) -> str:
    """controller-runtime's ``result`` label, in its order of precedence."""
    if result.error is not None:
        return "error"
    if result.requeue_after is not None and result.requeue_after > 0:
        return "requeue_after"
    if result.requeue:
        return "requeue"
    return "success"

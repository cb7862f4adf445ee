"""Kubernetes mode for the App: composes ``kube/``'s client, informers, Cluster port and leader election.

This is composition, so it lives beside the composition root (``app.py``), not in ``kube/``: ``kube/``
only provides the parts and never imports the controllers it would otherwise have to run.
``KubeRuntime.connect`` reaches the API server first (``App.create``), so the App builds every component
with the real ``Cluster``; ``start()`` then runs the informers.
Every replica serves events and webhooks from its informer cache; only the Lease holder reconciles,
and losing the Lease cancels the controllers at once (checklist H3) and stops the process (as Flux,
the Deployment restarts it and it campaigns again). Leader election talks to the API server through a
client of its own (own token bucket and connections), so the Lease is never renewed late because other
calls used up the shared client's budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from .api.silence import SILENCE_API_VERSION
from .errors import KubeError
from .kube.client import KubeClient
from .kube.cluster import KubeCluster
from .kube.graphwatch import GraphWatch
from .kube.informer import Informers, InvalidEntry, InvalidKey, watch_namespace
from .kube.leader import LeaderElector, lease_client_budget
from .kube.metrics import RestClientMetrics
from .logsetup import fields, object_fields
from .objects.base import ObjectRef, ObjectStore
from .objects.graph import FluxGraph
from .settings import Settings

if TYPE_CHECKING:
    from .controllers.manager import ControllerManager

log = logging.getLogger(__name__)

GROUP = "notification.toolkit.fluxcd.io"
_API_VERSIONS = {
    "Alert": f"{GROUP}/v1beta3",
    "Provider": f"{GROUP}/v1beta3",
    "Receiver": f"{GROUP}/v1",
    "Silence": SILENCE_API_VERSION,
}


class KubeConnection:
    """A connected client and its rest-client metrics: what ``KubeRuntime`` is built from."""

    def __init__(self, client: KubeClient, rest_metrics: RestClientMetrics) -> None:
        self.client = client
        self.rest_metrics = rest_metrics


class KubeRuntime:
    @staticmethod
    async def connect(settings: Settings, registry: CollectorRegistry) -> KubeConnection:
        """Load the kubeconfig (or the in-cluster config) and connect. Raises ``KubeError``."""
        rest_metrics = RestClientMetrics(registry)
        s = settings.kube
        client = await KubeClient.connect(
            s.kubeconfig, qps=s.qps, burst=s.burst, on_request=rest_metrics.observe
        )
        log.info("connected to the Kubernetes API at %s", client.host)
        return KubeConnection(client, rest_metrics)

    def __init__(
        self,
        settings: Settings,
        store: ObjectStore,
        connection: KubeConnection,
        graph: FluxGraph | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.client: KubeClient | None = connection.client
        self.cluster = KubeCluster(connection.client)
        namespace = watch_namespace(
            settings.kube.watch_all_namespaces, {"RUNTIME_NAMESPACE": settings.kube.runtime_namespace}
        )
        # Kustomizations and HelmReleases as edges, while an Alert has spec.inhibitDependents (inhibition)
        self.graph = GraphWatch(
            connection.client, store, graph if graph is not None else FluxGraph(), namespace=namespace
        )
        self.informers: Informers | None = None
        self.elector: LeaderElector | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._invalid_tasks: set[asyncio.Task[None]] = set()
        self.lost = asyncio.Event()  # set when leadership is lost: the App exits
        self.rest_metrics = connection.rest_metrics

    async def start(self) -> list[asyncio.Task[Any]]:
        s = self.settings
        assert self.client is not None
        namespace = watch_namespace(
            s.kube.watch_all_namespaces, {"RUNTIME_NAMESPACE": s.kube.runtime_namespace}
        )
        self.informers = Informers(self.client, self.store, namespace=namespace, on_invalid=self._on_invalid)
        task = asyncio.create_task(self.informers.run(), name="informers")
        graph = asyncio.create_task(self.graph.run(), name="inhibit-graph")
        self._tasks.extend((task, graph))
        return [task, graph]

    def run_controllers(self, controllers: ControllerManager) -> list[asyncio.Task[Any]]:
        """Reconcile while leading (or always, without leader election)."""
        task = asyncio.create_task(self._lead(controllers), name="leadership")
        self._tasks.append(task)
        return [task]

    async def _lead(self, controllers: ControllerManager) -> None:
        s = self.settings
        assert self.client is not None
        if not s.leader.enabled:
            await controllers.run()
            return
        namespace = s.kube.runtime_namespace or os.environ.get("RUNTIME_NAMESPACE", "")
        # The Lease gets a client of its own (own token bucket and connections): no burst of calls on the
        # shared client (event label lookups, reconciles) can queue a renewal behind it (issue 11).
        qps, burst = lease_client_budget(s.leader.retry_period)
        lease_client = await KubeClient.from_source(
            self.client.source, qps=qps, burst=burst, on_request=self.rest_metrics.observe
        )
        async with (
            lease_client,
            LeaderElector(
                lease_client,
                namespace=namespace,
                lease_duration=s.leader.lease_duration,
                renew_deadline=s.leader.renew_deadline,
                retry_period=s.leader.retry_period,
                release_on_cancel=s.leader.release_on_cancel,
            ) as elector,
        ):
            self.elector = elector
            log.info("campaigning for leadership as %s", elector.identity)
            await elector.wait_leading()
            log.info("leading as %s: starting the reconcilers", elector.identity)
            run = asyncio.create_task(controllers.run(), name="controllers")
            lost = asyncio.create_task(elector.wait_lost(), name="leader-lost")
            try:
                done, _ = await asyncio.wait({run, lost}, return_when=asyncio.FIRST_COMPLETED)
                if lost in done:
                    log.error("leadership lost as %s: stopping the reconcilers", elector.identity)
                    run.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await run
                    self.lost.set()
            finally:
                for task in (run, lost):
                    task.cancel()
                await controllers.stop(deadline=2.0)

    def _on_invalid(self, key: InvalidKey, entry: InvalidEntry | None) -> None:
        """An object the API server holds but our models reject (checklist D9): Ready=False, an Event."""
        if entry is None:
            return
        kind, namespace, name = key
        if kind not in _API_VERSIONS:
            return
        raw, error = entry
        meta = raw.get("metadata") or {}
        ref = ObjectRef(_API_VERSIONS[kind], kind, namespace, name, str(meta.get("uid", "")))
        generation = int(meta.get("generation") or 0)
        # Terminal, as docs/status.md promises: Ready=False and Stalled=True, reason ValidationFailed, with
        # Flux's prefix for configuration errors (the object cannot be fixed by retrying, only by an edit).
        message = f"Reconciliation failed terminally due to configuration error: invalid {kind} spec: {error}"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "status": "False",
            "reason": "ValidationFailed",
            "message": message[:32768],
            "lastTransitionTime": now,
            "observedGeneration": generation,
        }
        status = {
            "observedGeneration": generation,
            "conditions": [
                {"type": "Ready", **condition},
                {"type": "Stalled", **condition, "status": "True"},
            ],
        }
        log.error(
            "%s %s/%s rejected: %s",
            kind,
            namespace,
            name,
            error,
            extra=fields(**object_fields(kind, namespace, name, error=error)),
        )

        async def report() -> None:
            try:
                await self.cluster.patch_status(ref, status)
                await self.cluster.emit_event(ref, "Warning", "ValidationFailed", message, None)
            except KubeError as exc:
                log.warning("could not report invalid %s %s/%s: %s", kind, namespace, name, exc)

        task = asyncio.get_running_loop().create_task(report())
        self._invalid_tasks.add(task)
        task.add_done_callback(self._invalid_tasks.discard)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.client is not None:
            await self.client.close()

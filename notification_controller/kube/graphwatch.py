"""Flux's dependency graph in a cluster: a list+watch of Kustomizations (``kustomize.toolkit.fluxcd.io/v1``)
and HelmReleases (``helm.toolkit.fluxcd.io/v2``) reduced to their edges (``objects/graph.py``), for
inhibition (``spec.inhibitDependents``, ``dispatch/quiet/inhibit.py``).

* **Only while needed**: the watches run while some Alert has ``spec.inhibitDependents: true`` and stop
  (the graph emptied) when none has; a cluster that never uses inhibition never lists a Kustomization.
* **Least privilege**: ``get``, ``list``, ``watch`` on ``kustomizations`` and ``helmreleases``
  (config/rbac/role.yaml has them already for Receivers' annotations and label lookups).
* **Flux not installed**: a 404 for the resource (the CRD is absent) is logged once at info and the list is
  tried again every ``ABSENT_RETRY`` seconds; the rest of the controller does not care.
* **Bounded**: a list is read page by page (``PAGE_SIZE`` objects at a time) and each object is reduced to
  its edges at once, so neither a list nor the graph ever holds a spec; the graph keeps at most 10,000
  objects. Reconnects, 410s and stalls are the ``Informer``'s (``kube/informer.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from ..api.alert import Alert
from ..errors import KubeError
from ..objects.base import Change, ObjectStore
from ..objects.graph import FluxGraph, Node, edges
from .client import KubeClient, watch_status_error
from .informer import Informer, ResourceType

log = logging.getLogger(__name__)

KUSTOMIZATIONS = ResourceType("Kustomization", "kustomize.toolkit.fluxcd.io", "v1", "kustomizations")
HELM_RELEASES = ResourceType("HelmRelease", "helm.toolkit.fluxcd.io", "v2", "helmreleases")
ABSENT_RETRY = 60.0
"""Seconds between two lists of a resource whose CRD is not installed."""
PAGE_SIZE = 500


class GraphInformer(Informer):
    """One resource's objects as edges in a ``FluxGraph`` (the store the ``Informer`` is given is unused)."""

    def __init__(
        self,
        client: KubeClient,
        graph: FluxGraph,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        absent_retry: float = ABSENT_RETRY,
        **kwargs: Any,
    ) -> None:
        super().__init__(client, ObjectStore(), resource, namespace=namespace, page_size=PAGE_SIZE, **kwargs)
        self.graph = graph
        self.absent_retry = absent_retry
        self.absent = False
        self._nodes: dict[tuple[str, str], tuple[Node, ...]] = {}  # (namespace, name) -> the nodes it added

    def _apply(self, raw: Mapping[str, Any]) -> tuple[str, str] | None:
        key = self._key(raw)
        if key is None:
            return None
        doc_key = (key[1], key[2])
        found = edges({**raw, "kind": self.kind})
        kept = tuple(node for node, upstream in found if self.graph.put(node, upstream))
        for node in self._nodes.get(doc_key, ()):
            if node not in kept:
                self.graph.remove(node)
        if kept:
            self._nodes[doc_key] = kept
        else:
            self._nodes.pop(doc_key, None)
        return doc_key

    def _drop(self, doc_key: tuple[str, str]) -> None:
        for node in self._nodes.pop(doc_key, ()):
            self.graph.remove(node)

    def clear(self) -> None:
        for doc_key in list(self._nodes):
            self._drop(doc_key)
        self.resource_version = ""
        self.synced.clear()

    async def list_once(self) -> None:
        """List page by page, each object reduced to its edges at once; objects gone leave the graph."""
        while True:
            try:
                seen, rv = await self._list_pages()
                break
            except KubeError as exc:
                if not exc.not_found:
                    raise
                if not self.absent:
                    self.absent = True
                    log.info(
                        "%s: %s is not served (Flux's CRD is not installed?); inhibitDependents has no %s "
                        "edges; trying again every %gs",
                        self.kind,
                        self.resource.api_version,
                        self.kind,
                        self.absent_retry,
                    )
                await asyncio.sleep(self.absent_retry)
        if self.absent:
            self.absent = False
            log.info(
                "%s: %s is served now; watching it for inhibitDependents",
                self.kind,
                self.resource.api_version,
            )
        for doc_key in [k for k in self._nodes if k not in seen]:
            self._drop(doc_key)
        self.resource_version = rv
        self.lists += 1
        self.synced.set()

    async def _list_pages(self) -> tuple[set[tuple[str, str]], str]:
        for _ in range(3):
            seen: set[tuple[str, str]] = set()
            token = ""
            try:
                while True:
                    params = [("limit", str(self.page_size))]
                    if token:
                        params.append(("continue", token))
                    page = await self.client.request("GET", self.path, query=params)
                    items = page.get("items") or []
                    for raw in items if isinstance(items, list) else ():
                        if isinstance(raw, dict):
                            doc_key = self._apply(raw)
                            if doc_key is not None:
                                seen.add(doc_key)
                    meta = page.get("metadata") or {}
                    token = str(meta.get("continue") or "")
                    if not token:
                        return seen, str(meta.get("resourceVersion") or "")
            except KubeError as exc:
                if exc.gone and token:
                    continue
                raise
        raise KubeError(f"GET {self.path}: list kept expiring", status=410)

    def apply_list(self, items: list[dict[str, Any]]) -> None:
        seen = {k for k in (self._apply(raw) for raw in items) if k is not None}
        for doc_key in [k for k in self._nodes if k not in seen]:
            self._drop(doc_key)

    def apply_event(self, event: Mapping[str, Any]) -> None:
        type_ = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, dict):
            return
        if type_ == "ERROR":
            raise watch_status_error(self.path, raw)
        meta = raw.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if type_ in ("ADDED", "MODIFIED"):
            self._apply(raw)
        elif type_ == "DELETED":
            key = self._key(raw)
            if key is not None:
                self._drop((key[1], key[2]))
        if isinstance(rv, str) and rv:
            self.resource_version = rv


class GraphWatch:
    """The cluster's ``GraphSource``: runs the two ``GraphInformer`` while an Alert wants the graph."""

    def __init__(
        self,
        client: KubeClient,
        store: ObjectStore,
        graph: FluxGraph,
        *,
        namespace: str | None = None,
        absent_retry: float = ABSENT_RETRY,
    ) -> None:
        self._graph = graph
        self.informers = tuple(
            GraphInformer(client, graph, resource, namespace=namespace, absent_retry=absent_retry)
            for resource in (KUSTOMIZATIONS, HELM_RELEASES)
        )
        self._wanting: set[tuple[str, str]] = set()  # Alerts with spec.inhibitDependents
        self._changed = asyncio.Event()
        for alert in store.alerts():
            self._alert((alert.metadata.namespace, alert.metadata.name), alert)
        store.subscribe(self._on_change)

    def graph(self) -> FluxGraph:
        return self._graph

    @property
    def wanted(self) -> bool:
        return bool(self._wanting)

    def _on_change(self, change: Change) -> None:
        if change.kind == "Alert":
            obj = change.obj
            self._alert((change.namespace, change.name), obj if isinstance(obj, Alert) else None)

    def _alert(self, key: tuple[str, str], alert: Alert | None) -> None:
        before = bool(self._wanting)
        if alert is not None and alert.spec.inhibit_dependents:
            self._wanting.add(key)
        else:
            self._wanting.discard(key)
        if before != bool(self._wanting):
            self._changed.set()

    async def _until(self, wanted: bool) -> None:
        while self.wanted != wanted:
            self._changed.clear()
            await self._changed.wait()

    async def run(self) -> None:
        """Until cancelled: watch while wanted, stop (and forget the graph) while not."""
        while True:
            await self._until(True)
            log.info("an Alert has spec.inhibitDependents: watching Kustomizations and HelmReleases")
            tasks = [asyncio.create_task(i.run(), name=f"graph-{i.kind}") for i in self.informers]
            try:
                await self._until(False)
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                for informer in self.informers:
                    informer.clear()
            log.info("no Alert has spec.inhibitDependents: stopped watching Kustomizations and HelmReleases")

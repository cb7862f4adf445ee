"""Flux's dependency graph, as edges only: which sources and dependencies each object reconciles from
(issue 26 item 5, ``spec.inhibitDependents``).

One failing GitRepository makes every Kustomization and HelmRelease built from it fail, and each one
notifies (fluxcd/notification-controller#1370). Only Flux's own references say who depends on whom:

* a Kustomization: ``spec.sourceRef`` (GitRepository, OCIRepository, Bucket; the namespace defaults to the
  Kustomization's) and ``spec.dependsOn`` (other Kustomizations);
* a HelmRelease: ``spec.chart.spec.sourceRef`` (HelmRepository, GitRepository, Bucket) through the
  HelmChart helm-controller creates for it (named ``<namespace>-<name>`` in the source's namespace, so that
  chart is a node too, whose upstream is the source), or ``spec.chartRef`` (OCIRepository, HelmChart), and
  ``spec.dependsOn`` (other HelmReleases);
* a HelmChart of the manifests: ``spec.sourceRef`` in its own namespace.

Both modes feed one ``FluxGraph``: local mode from the manifests' other documents, rebuilt when a poll
loaded new files (``LocalGraph``); a cluster from a watch of Kustomizations and HelmReleases
(``kube/graphwatch.py``). Nothing here does I/O.

Bounded: at most ``MAX_OBJECTS`` objects are tracked (beyond: not tracked, counted in ``untracked``,
reported once by ``on_full``); each keeps only its edges (interned strings, at most ``MAX_EDGES``), never its
spec; the transitive walk (``upstream``) visits at most ``MAX_UPSTREAM`` nodes, so a cycle of ``dependsOn``
or a deep chain costs bounded work.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

Node = tuple[str, str, str]
"""(kind, namespace, name)."""

SOURCE_KINDS = frozenset({"GitRepository", "OCIRepository", "HelmRepository", "HelmChart", "Bucket"})
DEPENDENT_KINDS = frozenset({"Kustomization", "HelmRelease"})
GRAPH_KINDS = SOURCE_KINDS | DEPENDENT_KINDS
"""Kinds whose failure may inhibit others, or be inhibited."""

MAX_OBJECTS = 10_000
"""Objects (Kustomizations, HelmReleases and their HelmCharts) the graph tracks at most."""
MAX_EDGES = 64
"""Upstream references kept per object (a longer ``dependsOn`` is cut)."""
MAX_UPSTREAM = 256
"""Nodes the transitive walk visits at most (cycles and long chains end there)."""
MAX_NAME = 253
"""Longest name or namespace accepted (Kubernetes' own limit)."""

_KUSTOMIZATION_SOURCES = frozenset({"GitRepository", "OCIRepository", "Bucket"})
_CHART_SOURCES = frozenset({"HelmRepository", "GitRepository", "Bucket"})
_CHART_REFS = frozenset({"OCIRepository", "HelmChart"})


def describe(node: Node) -> str:
    """``Kind/namespace/name``, as notifications and explain say it."""
    return f"{node[0]}/{node[1]}/{node[2]}"


def _name(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= MAX_NAME:
        return sys.intern(value)
    return None


def _ref(ref: Any, kinds: frozenset[str], namespace: str, default_kind: str = "") -> Node | None:
    """A ``{kind, name, namespace}`` reference (namespace defaulting to the referrer's), or None."""
    if not isinstance(ref, Mapping):
        return None
    kind = ref.get("kind", default_kind) or default_kind
    name = _name(ref.get("name"))
    ns = _name(ref.get("namespace")) if ref.get("namespace") else namespace
    if kind not in kinds or name is None or ns is None:
        return None
    return (sys.intern(kind), ns, name)


def edges(doc: Mapping[str, Any]) -> list[tuple[Node, tuple[Node, ...]]]:
    """The nodes one document adds, each with its direct upstream: its own, and for a HelmRelease with
    ``spec.chart`` the HelmChart helm-controller makes for it. Malformed references are skipped."""
    kind = doc.get("kind")
    meta = doc.get("metadata")
    spec = doc.get("spec")
    if kind not in ("Kustomization", "HelmRelease", "HelmChart") or not isinstance(meta, Mapping):
        return []
    name, namespace = _name(meta.get("name")), _name(meta.get("namespace") or "default")
    if name is None or namespace is None:
        return []
    node: Node = (sys.intern(kind), namespace, name)
    if not isinstance(spec, Mapping):
        return [(node, ())]
    upstream: list[Node] = []
    out: list[tuple[Node, tuple[Node, ...]]] = []
    if kind == "HelmChart":
        source = _ref(spec.get("sourceRef"), _CHART_SOURCES, namespace)
        return [(node, (source,) if source else ())]
    if kind == "Kustomization":
        source = _ref(spec.get("sourceRef"), _KUSTOMIZATION_SOURCES, namespace)
        if source:
            upstream.append(source)
    else:
        chart = spec.get("chart")
        chart_spec = chart.get("spec") if isinstance(chart, Mapping) else None
        if isinstance(chart_spec, Mapping):
            source = _ref(chart_spec.get("sourceRef"), _CHART_SOURCES, namespace)
            if source:
                chart_name = _name(f"{namespace}-{name}")
                if chart_name is not None:
                    chart_node: Node = ("HelmChart", source[1], chart_name)
                    upstream.append(chart_node)
                    out.append((chart_node, (source,)))
        else:
            ref = _ref(spec.get("chartRef"), _CHART_REFS, namespace)
            if ref:
                upstream.append(ref)
    depends = spec.get("dependsOn")
    if isinstance(depends, Sequence) and not isinstance(depends, str):
        for dep in depends[:MAX_EDGES]:
            found = _ref(dep, DEPENDENT_KINDS, namespace, default_kind=kind)
            if found is not None and found[0] == kind and found != node:
                upstream.append(found)
    return [(node, tuple(dict.fromkeys(upstream))[:MAX_EDGES]), *out]


class FluxGraph:
    """Each tracked object's direct upstream, and the walk to every transitive one (module docstring)."""

    __slots__ = ("_referenced", "_up", "_warned", "limit", "on_full", "untracked")

    def __init__(self, limit: int = MAX_OBJECTS, on_full: Callable[[int], None] | None = None) -> None:
        self.limit = limit
        self.on_full = on_full
        """Called once when the graph first refuses an object (with the limit), to warn; again only after
        it had room once more."""
        self.untracked = 0
        """Objects refused because the graph was full, since the last ``replace`` (a metric: a watch event
        of a refused object counts again)."""
        self._warned = False
        self._up: dict[Node, tuple[Node, ...]] = {}
        self._referenced: dict[Node, int] = {}  # upstream node -> how many tracked objects name it

    def __len__(self) -> int:
        return len(self._up)

    def __contains__(self, node: object) -> bool:
        return node in self._up

    def referenced(self, node: Node) -> bool:
        """Whether some tracked object depends on ``node`` directly (only those can inhibit)."""
        return node in self._referenced

    def direct(self, node: Node) -> tuple[Node, ...]:
        return self._up.get(node, ())

    def put(self, node: Node, upstream: tuple[Node, ...]) -> bool:
        """Track (or update) ``node``; False when the graph is full and it is not tracked."""
        old = self._up.get(node)
        if old is None and len(self._up) >= self.limit:
            self.untracked += 1
            if not self._warned:
                self._warned = True
                if self.on_full is not None:
                    self.on_full(self.limit)
            return False
        if old == upstream:
            return True
        if old:
            self._unref(old)
        self._up[node] = upstream
        for up in upstream:
            self._referenced[up] = self._referenced.get(up, 0) + 1
        return True

    def remove(self, node: Node) -> None:
        old = self._up.pop(node, None)
        if old:
            self._unref(old)

    def _unref(self, nodes: tuple[Node, ...]) -> None:
        for up in nodes:
            left = self._referenced.get(up, 0) - 1
            if left > 0:
                self._referenced[up] = left
            else:
                self._referenced.pop(up, None)

    def put_document(self, doc: Mapping[str, Any]) -> None:
        for node, upstream in edges(doc):
            self.put(node, upstream)

    def remove_document(self, doc: Mapping[str, Any]) -> None:
        for node, _ in edges({**doc, "spec": doc.get("spec") or {}}):
            self.remove(node)

    def replace(self, docs: Iterable[Mapping[str, Any]]) -> None:
        """Make the graph exactly these documents' (a relist, a reload)."""
        self._up.clear()
        self._referenced.clear()
        self.untracked = 0
        for doc in docs:
            self.put_document(doc)
        if not self.untracked:
            self._warned = False  # it had room: a later overflow warns again

    def upstream(self, node: Node, limit: int = MAX_UPSTREAM) -> list[Node]:
        """Every node ``node`` depends on, nearest first (breadth first), at most ``limit``; cycles end."""
        seen = {node}
        out: list[Node] = []
        queue = deque(self._up.get(node, ()))
        while queue and len(out) < limit:
            up = queue.popleft()
            if up in seen:
                continue
            seen.add(up)
            out.append(up)
            queue.extend(self._up.get(up, ()))
        return out


class GraphSource(Protocol):
    """Where the inhibition stage reads the graph: the current one (``LocalGraph``, ``GraphWatch``)."""

    def graph(self) -> FluxGraph: ...


class StaticGraph:
    """A graph given once (explain, tests)."""

    def __init__(self, graph: FluxGraph) -> None:
        self._graph = graph

    def graph(self) -> FluxGraph:
        return self._graph


class LocalGraph:
    """Local mode: the graph of the manifests' other documents (``LocalCluster.others``), rebuilt when a
    poll loaded new files (``set_others`` replaces that dict: its identity says it changed)."""

    def __init__(self, others: Callable[[], Mapping[Any, Mapping[str, Any]]], graph: FluxGraph) -> None:
        self._others = others
        self._graph = graph
        self._seen: object = None

    def graph(self) -> FluxGraph:
        current = self._others()
        if current is not self._seen:
            self._seen = current
            self._graph.replace(
                doc
                for doc in current.values()
                if doc.get("kind") in ("Kustomization", "HelmRelease", "HelmChart")
            )
        return self._graph

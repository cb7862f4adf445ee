"""Flux's dependency graph (objects/graph.py): the edges Flux's own references make, the transitive walk,
and its bounds (10,000 objects, cycles, long chains, hostile documents)."""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

from notification_controller.objects.graph import (
    MAX_EDGES,
    MAX_OBJECTS,
    FluxGraph,
    LocalGraph,
    edges,
)


def ks(name: str, namespace: str = "flux-system", **spec: Any) -> dict[str, Any]:
    return {"kind": "Kustomization", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def hr(name: str, namespace: str = "apps", **spec: Any) -> dict[str, Any]:
    return {"kind": "HelmRelease", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_kustomization_source_and_depends_on_default_to_its_namespace() -> None:
    doc = ks(
        "apps",
        sourceRef={"kind": "GitRepository", "name": "repo"},
        dependsOn=[{"name": "infra"}, {"name": "crds", "namespace": "platform"}],
    )
    assert edges(doc) == [
        (
            ("Kustomization", "flux-system", "apps"),
            (
                ("GitRepository", "flux-system", "repo"),
                ("Kustomization", "flux-system", "infra"),
                ("Kustomization", "platform", "crds"),
            ),
        )
    ]


def test_helmrelease_through_the_helmchart_flux_creates() -> None:
    doc = hr(
        "podinfo",
        chart={
            "spec": {
                "chart": "podinfo",
                "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": "flux-system"},
            }
        },
        dependsOn=[{"name": "redis"}],
    )
    chart = ("HelmChart", "flux-system", "apps-podinfo")
    assert edges(doc) == [
        (("HelmRelease", "apps", "podinfo"), (chart, ("HelmRelease", "apps", "redis"))),
        (chart, (("HelmRepository", "flux-system", "charts"),)),
    ]


def test_helmrelease_chart_ref() -> None:
    doc = hr("podinfo", chartRef={"kind": "OCIRepository", "name": "podinfo"})
    assert edges(doc) == [(("HelmRelease", "apps", "podinfo"), (("OCIRepository", "apps", "podinfo"),))]


def test_malformed_references_are_skipped_not_fatal() -> None:
    doc = ks(
        "apps",
        sourceRef={"kind": "ConfigMap", "name": "x"},  # not a source kind
        dependsOn=["infra", {"name": 3}, {"name": "x" * 300}, {"name": "self-ref"}, {"name": "apps"}],
    )
    assert edges(doc) == [
        (("Kustomization", "flux-system", "apps"), (("Kustomization", "flux-system", "self-ref"),))
    ]
    assert edges({"kind": "Kustomization", "metadata": "nope"}) == []
    assert edges({"kind": "GitRepository", "metadata": {"name": "r"}}) == []
    assert edges(ks("a", dependsOn=[{"name": f"d{i}"} for i in range(1000)]))[0][1].__len__() == MAX_EDGES


def test_upstream_is_transitive_nearest_first() -> None:
    graph = FluxGraph()
    graph.put_document(ks("infra", sourceRef={"kind": "GitRepository", "name": "repo"}))
    graph.put_document(
        ks("apps", sourceRef={"kind": "OCIRepository", "name": "oci"}, dependsOn=[{"name": "infra"}])
    )
    graph.put_document(
        ks("dash", sourceRef={"kind": "OCIRepository", "name": "oci"}, dependsOn=[{"name": "apps"}])
    )
    assert graph.upstream(("Kustomization", "flux-system", "dash")) == [
        ("OCIRepository", "flux-system", "oci"),
        ("Kustomization", "flux-system", "apps"),
        ("Kustomization", "flux-system", "infra"),
        ("GitRepository", "flux-system", "repo"),
    ]
    assert graph.referenced(("GitRepository", "flux-system", "repo"))
    graph.remove(("Kustomization", "flux-system", "infra"))
    assert not graph.referenced(("GitRepository", "flux-system", "repo"))


def test_cycles_end() -> None:
    graph = FluxGraph()
    for i in range(50):
        graph.put_document(ks(f"k{i}", dependsOn=[{"name": f"k{(i + 1) % 50}"}]))
    started = time.perf_counter()
    up = graph.upstream(("Kustomization", "flux-system", "k0"))
    assert len(up) == 49 and ("Kustomization", "flux-system", "k0") not in up
    assert time.perf_counter() - started < 0.1


def test_a_long_chain_is_walked_at_most_limit_nodes() -> None:
    graph = FluxGraph()
    for i in range(5000):
        graph.put_document(ks(f"k{i}", dependsOn=[{"name": f"k{i + 1}"}]))
    assert len(graph.upstream(("Kustomization", "flux-system", "k0"), limit=64)) == 64


def test_ten_thousand_objects_and_no_more_bounded_in_memory_and_time() -> None:
    full: list[int] = []
    graph = FluxGraph(on_full=full.append)
    docs = [
        ks(
            f"app-{i}",
            namespace=f"team-{i % 100}",
            sourceRef={"kind": "GitRepository", "name": "repo", "namespace": "flux-system"},
            dependsOn=[{"name": f"app-{i - 1}"}],
            # what a real Kustomization carries besides its references: never kept
            patches=[{"patch": "x" * 2000}],
            postBuild={"substitute": {f"k{j}": "v" * 50 for j in range(20)}},
        )
        for i in range(MAX_OBJECTS + 2500)
    ]
    tracemalloc.start()
    started = time.perf_counter()
    graph.replace(docs)
    elapsed = time.perf_counter() - started
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(graph) == MAX_OBJECTS
    assert graph.untracked == 2500 and full == [MAX_OBJECTS]  # warned once
    assert elapsed < 5.0, elapsed
    assert size < 8 * 1024 * 1024, size  # edges only: ~300 B an object, not the ~4 KB specs
    graph.replace(docs[:10])
    assert len(graph) == 10 and graph.untracked == 0
    graph.replace(docs)
    assert full == [MAX_OBJECTS, MAX_OBJECTS]  # full again after it had room: warned again


def test_local_graph_rebuilds_when_the_manifests_reload() -> None:
    others: dict[tuple[str, str, str], dict[str, Any]] = {
        ("Kustomization", "flux-system", "a"): ks("a", sourceRef={"kind": "GitRepository", "name": "r"}),
        ("GitRepository", "flux-system", "r"): {"kind": "GitRepository", "metadata": {"name": "r"}},
    }
    holder = {"others": others}
    local = LocalGraph(lambda: holder["others"], FluxGraph())
    assert len(local.graph()) == 1
    holder["others"] = {}
    assert len(local.graph()) == 0

"""Label-selected Alerts under a burst (issue 11, item 4): bounded lookups, every notification accounted for.

The real controller runs in local mode; ``Cluster.get_metadata`` (the port the label lookups go through,
served from the manifests directory) is wrapped to count the calls and, where a test needs it, to hold
them until the test lets them go. The cache itself (``dispatch/labels.py``) is the code under test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from notification_controller.dispatch.labels import LabelCache, LabelCacheLimits, LookupResult
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.objects.local import LocalCluster
from notification_controller.settings import EventSettings
from tests.integration.appkit import events_url, local_cluster, metric, running_app, write
from tests.support.capture import CaptureServer

KS_API = "kustomize.toolkit.fluxcd.io/v1"

GetMetadata = Callable[[str, str, str, str], Awaitable[dict[str, Any]]]


def manifests(tmp: Path, url: str) -> Path:
    write(
        tmp,
        "objects.yaml",
        f"""\
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: sink, namespace: apps}}
        spec: {{type: generic, address: "{url}/labels"}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: team-a, namespace: apps}}
        spec:
          providerRef: {{name: sink}}
          eventSources: [{{kind: Kustomization, name: '*', matchLabels: {{team: a}}}}]
        ---
        apiVersion: {KS_API}
        kind: Kustomization
        metadata: {{name: web, namespace: apps, labels: {{team: a}}}}
        ---
        apiVersion: {KS_API}
        kind: Kustomization
        metadata: {{name: db, namespace: apps, labels: {{team: b}}}}
        """,
    )
    return tmp


def event(name: str, message: str, *, kind: str = "Kustomization", api_version: str = KS_API) -> bytes:
    return json.dumps(
        {
            "involvedObject": {"kind": kind, "namespace": "apps", "name": name, "apiVersion": api_version},
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "ReconciliationSucceeded",
            "reportingController": "kustomize-controller",
        }
    ).encode()


async def post_all(url: str, bodies: list[bytes]) -> list[int]:
    async with aiohttp.ClientSession() as session:

        async def one(body: bytes) -> int:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                return resp.status

        return list(await asyncio.gather(*(one(b) for b in bodies)))


class CountingPort:
    """Counts ``get_metadata`` calls on the real LocalCluster; ``gate`` (when set) holds them."""

    def __init__(self, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, str, str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.gate: asyncio.Event | None = None
        self._real: GetMetadata = cluster.get_metadata
        monkeypatch.setattr(cluster, "get_metadata", self.get_metadata)

    async def get_metadata(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append((api_version, kind, namespace, name))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            return await self._real(api_version, kind, namespace, name)
        finally:
            self.in_flight -= 1


async def test_a_burst_for_one_object_makes_one_get(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url)) as app:
        port = CountingPort(local_cluster(app), monkeypatch)
        statuses = await post_all(events_url(app), [event("web", f"burst {i}") for i in range(300)])
        assert statuses == [202] * 300
        assert await app.dispatcher.wait_idle(10)

        assert port.calls == [(KS_API, "Kustomization", "apps", "web")]
        assert len(sink.requests) == 300
        assert metric(app, "notification_delivered_total", provider_type="generic") == 300
        assert metric(app, "notification_label_fetches_total", outcome="ok") == 1
        lookups = {
            r: metric(app, "notification_label_lookups_total", result=r) for r in ("fetched", "shared", "hit")
        }
        assert lookups["fetched"] == 1 and lookups["shared"] + lookups["hit"] == 299, lookups

        # Labels that do not select: the events are counted as unmatched, still one GET for the object.
        assert await post_all(events_url(app), [event("db", f"b {i}") for i in range(50)]) == [202] * 50
        assert await app.dispatcher.wait_idle(10)
        assert len(port.calls) == 2
        assert metric(app, "notification_events_unmatched_total") == 50
        assert len(sink.requests) == 300


async def test_failed_and_refused_lookups_are_counted_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url)) as app:
        cluster = local_cluster(app)
        port = CountingPort(cluster, monkeypatch)
        ghosts = [event("ghost", f"ghost {i}") for i in range(40)]
        assert await post_all(events_url(app), ghosts) == [202] * 40
        assert await app.dispatcher.wait_idle(10)
        assert port.calls == [(KS_API, "Kustomization", "apps", "ghost")]  # the 404 is remembered
        assert metric(app, "notification_dropped_total", provider_type="generic", reason="label_lookup") == 40
        assert metric(app, "notification_label_lookups_total", result="not_found") == 40
        warnings = [e for e in cluster.events if e[2] == "SourceFetchFailed"]
        assert warnings and warnings[0][3] == "error getting source object Kustomization/apps/ghost"

        # References the controller must never look up (path injection, the core group, a bad name).
        hostile = [
            event("x", "inject", api_version="kustomize.toolkit.fluxcd.io/v1/../../../api/v1"),
            event("x", "core", api_version="v1"),
            event("a/../../secrets/x", "name"),
        ]
        assert await post_all(events_url(app), hostile) == [202] * 3
        assert await app.dispatcher.wait_idle(10)
        assert len(port.calls) == 1
        assert (
            metric(app, "notification_dropped_total", provider_type="generic", reason="label_lookup_rejected")
            == 3
        )
        assert metric(app, "notification_label_lookups_total", result="rejected") == 3
        assert sink.requests == []


async def test_a_burst_for_many_objects_is_bounded_and_overflow_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Distinct objects defeat the cache: GETs in flight stay at the budget, the overflow is refused and
    counted at once (not queued for minutes), and every notification ends delivered or counted."""
    waiting = LabelCacheLimits().max_waiting
    events = EventSettings(label_lookup_concurrency=2)
    async with CaptureServer() as sink, running_app(manifests(tmp_path, sink.url), events=events) as app:
        port = CountingPort(local_cluster(app), monkeypatch)
        port.gate = asyncio.Event()
        total = waiting + 2 + 30
        bodies = [event(f"ghost-{i}", f"m {i}") for i in range(total - 1)] + [event("web", "real")]
        assert await post_all(events_url(app), bodies) == [202] * total

        async def overflow_counted() -> None:
            reason = "label_lookup_overload"
            while metric(app, "notification_dropped_total", provider_type="generic", reason=reason) < 30:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(overflow_counted(), 10)  # refused while the budget was still held
        assert port.max_in_flight == 2
        port.gate.set()
        assert await app.dispatcher.wait_idle(10)

        assert port.max_in_flight == 2
        assert len(port.calls) == waiting + 2
        delivered = metric(app, "notification_delivered_total", provider_type="generic")
        dropped = sum(
            metric(app, "notification_dropped_total", provider_type="generic", reason=r)
            for r in ("label_lookup", "label_lookup_overload", "label_lookup_rejected")
        )
        assert delivered + dropped == total
        assert delivered == len(sink.requests) <= 1


async def test_a_hanging_api_times_out_and_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalCluster(ObjectStore())
    calls = 0

    async def hang(api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        await asyncio.Event().wait()  # an API server that accepts the request and never answers
        return {}

    monkeypatch.setattr(cluster, "get_metadata", hang)
    metrics = EventMetrics(CollectorRegistry())
    cache = LabelCache(cluster, metrics, limits=LabelCacheLimits(timeout=0.05))
    lookups = [cache.lookup(KS_API, "Kustomization", "apps", "web") for _ in range(20)]
    results = await asyncio.gather(*lookups)
    assert {r.result for r in results} == {LookupResult.TIMEOUT}
    assert calls == 1  # the twenty lookups shared one GET
    sample = metrics.registry.get_sample_value
    assert sample("notification_label_fetches_total", {"outcome": "timeout"}) == 1
    assert sample("notification_label_lookups_total", {"result": "timeout"}) == 20
    # A failure is not cached: the next lookup asks again.
    again = await cache.lookup(KS_API, "Kustomization", "apps", "web")
    assert again.result is LookupResult.TIMEOUT and calls == 2
    await cache.close()

"""Inhibition under attack (issue 26 item 5), through the real controller in local mode on real ports:

* 12,000 Kustomizations in the manifests, every three in a ``dependsOn`` cycle: the graph keeps 10,000
  (the rest counted in ``notification_inhibit_graph_untracked``, one warning), and the walk of a cycle ends;
* a storm of error events about 10,000 distinct invented GitRepositories (unauthenticated: anyone who
  reaches the event port can send them) writes nothing to the store: only objects the graph depends on are
  recorded as failing, and those records expire (``FAILING_TTL``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import aiohttp
import pytest

from notification_controller.objects.graph import MAX_OBJECTS
from notification_controller.store.memory import MemoryStore
from tests.integration.appkit import events_url, metric, running_app
from tests.support.capture import CaptureServer

OBJECTS = MAX_OBJECTS + 2000
STORM = 10_000


def manifests(directory: Path, sink: str) -> Path:
    directory.mkdir()
    lines = [
        f"""apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: flux-system}}
spec: {{type: generic, address: "{sink}"}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: flux, namespace: flux-system}}
spec:
  providerRef: {{name: sink}}
  eventSources: [{{kind: Kustomization, name: "*"}}]
  inhibitDependents: true
"""
    ]
    for i in range(OBJECTS):
        cycle = i - i % 3 + (i + 1) % 3  # k0 -> k1 -> k2 -> k0, k3 -> k4 -> k5 -> k3, ...
        lines.append(
            f"""apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: k{i}, namespace: flux-system}}
spec:
  sourceRef: {{kind: GitRepository, name: repo}}
  dependsOn: [{{name: k{cycle}}}]
  path: ./k{i}
  interval: 10m
"""
        )
    (directory / "all.yaml").write_text("---\n".join(lines), encoding="utf-8")
    return directory


def event(kind: str, name: str, severity: str = "error") -> bytes:
    group = "source.toolkit.fluxcd.io" if kind == "GitRepository" else "kustomize.toolkit.fluxcd.io"
    return json.dumps(
        {
            "involvedObject": {
                "kind": kind,
                "namespace": "flux-system",
                "name": name,
                "apiVersion": f"{group}/v1",
            },
            "severity": severity,
            "timestamp": "2026-11-27T10:00:00Z",
            "message": f"{name}: {severity}",
            "reason": "Failed",
            "reportingController": "source-controller",
        }
    ).encode()


@pytest.mark.timeout(300)
async def test_many_objects_cycles_and_an_error_storm(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="notification_controller.app")
    async with CaptureServer() as sink, running_app(manifests(tmp_path / "m", sink.url + "/hook")) as app:
        state = app.noise.state
        assert isinstance(state, MemoryStore)
        url = events_url(app)
        async with aiohttp.ClientSession() as session:

            async def post(body: bytes) -> int:
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                    return resp.status

            # the source fails; every member of a cycle fails too: held, and the walk ends
            assert await post(event("GitRepository", "repo")) == 202
            started = time.perf_counter()
            for name in ("k0", "k1", "k2"):
                assert await post(event("Kustomization", name)) == 202
            assert await app.dispatcher.wait_idle(30)
            assert time.perf_counter() - started < 30
            assert metric(app, "notification_suppressed_total", reason="inhibited") == 3
            assert metric(app, "notification_inhibit_graph_objects") == MAX_OBJECTS
            assert metric(app, "notification_inhibit_graph_untracked") == OBJECTS - MAX_OBJECTS
            full = [r for r in caplog.records if "graph tracks 10000 objects already" in r.getMessage()]
            assert len(full) == 1, [r.getMessage() for r in caplog.records]

            keys_before = state.keys()
            started = time.perf_counter()
            limit = asyncio.Semaphore(32)

            async def storm(i: int) -> int:
                async with limit:
                    return await post(event("GitRepository", f"invented-{i}"))

            answers = await asyncio.gather(*(storm(i) for i in range(STORM)))
            assert await app.dispatcher.wait_idle(60)
            elapsed = time.perf_counter() - started
            assert set(answers) == {202}
            # nothing depends on the invented sources: not one key for them (the duplicate window of
            # Flux's rate limiter aside, which the memory store bounds by its own TTL)
            assert state.keys() - keys_before <= STORM  # the rate limiter's keys, at most one an event
            failing = [k for k in state._kv if k.startswith("quiet/failing/")]
            assert len(failing) <= 4, failing  # repo, k0, k1, k2
            assert elapsed < 240, elapsed
        assert sink.requests == []  # the Kustomizations' errors were held: nothing was sent

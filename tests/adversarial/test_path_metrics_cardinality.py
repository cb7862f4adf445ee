"""``--export-http-path-metrics`` must not let a client create metric series at will (issue 11 item 6).

The event server accepts any path (Flux), and with the flag Flux labels its HTTP metrics with the request
path: every random path was a new ``handler`` value in three metric families, so an unauthenticated client
could grow the controller's memory and every Prometheus scrape without bound (the old 1,000-entry cap only
bounded a cache of metric children, not the series). Now the paths the server knows (``/``) keep their own
label and every other path is counted as ``other``.

Run against the real event app served the way ``App`` serves it (production ``runner_kwargs``) and, for the
flag's wiring, the real controller in local mode.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from notification_controller.app import App
from notification_controller.core.ratelimit import FixedWindowLimiter
from notification_controller.dispatch.builder import build
from notification_controller.lib.clock import SystemClock
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP
from notification_controller.server.events import EventEndpoint, EventServerSettings
from notification_controller.settings import ServerSettings, Settings
from tests.adversarial.kit import event_body, samples
from tests.support.memory_cluster import MemoryCluster
from tests.support.sinks import LogSink

DURATION = "gotk_event_http_request_duration_seconds_count"
SIZE = "gotk_event_http_response_size_bytes_count"
INFLIGHT = "gotk_event_http_requests_inflight"
PATHS = 300


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, CollectorRegistry]]:
    """The event app with ``export_path_metrics=True`` and no Alerts (every event is 202, unmatched)."""
    store = ObjectStore()
    store.mark_synced()
    registry = CollectorRegistry()
    metrics = EventMetrics(registry)
    http = OutboundHTTP()
    await http.start()
    dispatcher = build(store, MemoryCluster(), http, LogSink(), metrics).dispatcher
    limiter = FixedWindowLimiter(300.0, SystemClock())
    settings = EventServerSettings()
    endpoint = EventEndpoint(dispatcher, limiter, metrics, ready=lambda: True, export_path_metrics=True)
    server = endpoint.server(settings)
    port = await server.start("127.0.0.1", 0)
    try:
        yield port, registry
    finally:
        await server.stop()
        await http.close()


def handlers(registry: CollectorRegistry) -> set[str]:
    """Every ``handler`` label value in the three HTTP metric families."""
    return {
        labels["handler"]
        for name in (DURATION, SIZE, INFLIGHT)
        for labels, _ in samples(registry, name)
        if "handler" in labels
    }


async def test_random_paths_do_not_create_series(server: tuple[int, CollectorRegistry]) -> None:
    port, registry = server
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        for i in range(PATHS):
            path = f"/{secrets.token_hex(8)}/{i}"
            method = "POST" if i % 2 else "GET"
            async with session.request(method, base + path, data=event_body(f"p{i}", name=f"n{i}")) as resp:
                assert resp.status == (202 if method == "POST" else 405)
        async with session.post(base + "/", data=event_body("root")) as resp:
            assert resp.status == 202
    assert handlers(registry) == {"/", "other"}
    series = samples(registry, DURATION)
    assert len(series) <= 4, series  # (/ or other) x (POST 202 or GET 405)
    counts = {(labels["handler"], labels["method"], labels["code"]): value for labels, value in series}
    assert counts[("other", "POST", "202")] == PATHS // 2
    assert counts[("other", "GET", "405")] == PATHS // 2
    assert counts[("/", "POST", "202")] == 1


async def test_the_flag_reaches_the_event_server(tmp_path: Path) -> None:
    """``Settings.server.export_http_path_metrics`` is what the App hands to the event server."""
    settings = Settings(
        server=ServerSettings(
            events_addr="127.0.0.1:0",
            receiver_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            health_addr="127.0.0.1:0",
            export_http_path_metrics=True,
        ),
        manifests=tmp_path,
    )
    app = App(settings)
    await app.start()
    try:
        async with aiohttp.ClientSession() as session:
            for path in ("/", "/a", "/b/c"):
                url = f"http://127.0.0.1:{app.ports['events']}{path}"
                async with session.post(url, data=event_body(path)) as resp:
                    assert resp.status == 202
    finally:
        await app.stop()
    assert handlers(app.registry) == {"/", "other"}

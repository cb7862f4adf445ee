"""Start the real controller (``App``) in-process on free ports, in local mode on a temp directory."""

from __future__ import annotations

import io
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from notification_controller.app import App
from notification_controller.objects.local import LocalCluster
from notification_controller.outbound import RetryPolicy
from notification_controller.settings import (
    EventSettings,
    ServerSettings,
    Settings,
    SilenceSettings,
    StoreSettings,
)

FAST_RETRY = RetryPolicy(max_attempts=5, wait_min=0.01, wait_max=0.05)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


@asynccontextmanager
async def running_app(
    manifests: Path,
    *,
    events: EventSettings | None = None,
    store: StoreSettings | None = None,
    retry: RetryPolicy | None = FAST_RETRY,
    grace: float = 5.0,
    silences: SilenceSettings | None = None,
) -> AsyncIterator[App]:
    settings = Settings(
        server=ServerSettings(
            events_addr="127.0.0.1:0",
            receiver_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            health_addr="127.0.0.1:0",
            shutdown_grace=grace,
        ),
        events=events or EventSettings(),
        store=store or StoreSettings(),
        silences=silences or SilenceSettings(),
        manifests=manifests,
        manifests_poll_interval=0.1,
    )
    app = App(settings, retry=retry)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


def events_url(app: App) -> str:
    return f"http://127.0.0.1:{app.ports['events']}/"


def local_cluster(app: App) -> LocalCluster:
    assert isinstance(app.cluster, LocalCluster)
    return app.cluster


async def post_event(app: App, body: bytes, **headers: str) -> aiohttp.ClientResponse:
    async with aiohttp.ClientSession() as session:
        resp = await session.post(
            events_url(app), data=io.BytesIO(body), headers={"Content-Type": "application/json", **headers}
        )
        await resp.read()
        return resp


def metric(app: App, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` (a series may carry more labels than a
    test names, e.g. ``provider`` beside ``provider_type``)."""
    total = 0.0
    for family in app.registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total

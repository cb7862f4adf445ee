"""``/metrics`` in the Prometheus text format, from the app's own registry.

Rendered in a worker thread: with thousands of objects (``gotk_reconcile_duration_seconds`` has a histogram
per object, as in Flux) the text is megabytes and takes most of a second, which on the loop would stall
every listener, health included, at each scrape (issue 11 item 3's scale test).
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def create_metrics_app(registry: CollectorRegistry) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app

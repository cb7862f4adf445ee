"""``/metrics`` in the Prometheus text format, from the app's own registry."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def create_metrics_app(registry: CollectorRegistry) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app

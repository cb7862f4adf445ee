"""``/healthz`` (the loop is alive) and ``/readyz`` (the cache synced and we are not shutting down)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


def create_health_app(ready: Callable[[], bool]) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app

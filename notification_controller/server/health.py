"""``/healthz`` (the loop is alive) and ``/readyz`` (the cache synced, we are not shutting down, and the
durable store can be written now).

``/readyz`` asks the store itself (``Store.ping``, a real write for SQLite, a JetStream round trip for
NATS) within ``PROBE_TIMEOUT``: a store another process has locked, a full disk or a dead writer thread
makes the pod unready, instead of answering 200 while every event POST fails (issue 23 item 4).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..errors import StoreError

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 0.8
"""Seconds ``/readyz`` waits for the store: under the kubelet's default probe timeout (1 s), so a store
that does not answer is a 503, not a probe timeout counted the same way but without a reason."""


def create_health_app(
    ready: Callable[[], bool], probe: Callable[[], Awaitable[None]] | None = None
) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if not ready():
            return web.Response(status=503, text="not ready\n")
        if probe is not None:
            try:
                async with asyncio.timeout(PROBE_TIMEOUT):
                    await probe()
            except (StoreError, TimeoutError) as exc:
                log.debug("not ready: state store: %s", exc or "no answer in time")
                return web.Response(status=503, text="state store unavailable\n")
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app

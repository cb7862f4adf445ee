"""The event ingest server on ``--events-addr`` (reference §3.1–3.3).

Pipeline per request, as Flux: body ≤ 3 MiB (413) → JSON decode (400) → metadata cleanup →
duplicate limiter (429 with ``X-RateLimit-*``/``Retry-After``) → hand-off → 202 with an empty body.
Deliberate differences (documented in README "Compatibility"):
* only ``POST`` is accepted (405 otherwise; Flux accepts any method, producers only POST);
* until the object cache has synced, and while shutting down, the answer is 503, not 202: Flux's
  producers retry a 503, whereas a 202 from an empty cache silently loses the event (checklist C3/D10).

Slow clients (checklist B7; Flux: ReadHeaderTimeout 10 s, ReadTimeout 30 s). aiohttp has no header-read
timeout, but it arms its keep-alive timer when a connection is accepted and again after each response, and
closes the connection if no complete request head arrived by then: ``runner_kwargs`` sets that timer to
``EventServerSettings.header_timeout``, so a silent client or one trickling its headers is closed after
10 s (idle keep-alive connections too). The body is read within ``body_read_timeout`` (30 s) → 400 and the
connection is closed after at most ``lingering_time`` (2 s, as Go discards a bounded rest of the body; aiohttp
would read and discard for 10 s). An oversized or unreadable body also closes the connection.

``--export-http-path-metrics`` labels the HTTP metrics with the request path, as Flux does, but only paths
the event server knows (``KNOWN_PATHS``: ``/``, where Flux's controllers POST) get their own ``handler``
value; every other path counts as ``other``. The path is the client's to choose, and Flux's label is
unbounded: 100,000 random paths were 100,000 new series per metric (issue 11 item 6).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..api.event import Event, EventDecodeError
from ..core.metadata import cleanup_metadata
from ..core.ratelimit import FixedWindowLimiter, event_key
from ..dispatch.dispatcher import Dispatcher
from ..dispatch.duplicates import SharedDuplicateWindow
from ..errors import StoreError
from ..metrics import EventMetrics

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
_HANDLER = "/"
KNOWN_PATHS = frozenset({_HANDLER})
"""Paths reported as themselves with ``--export-http-path-metrics`` (Flux's controllers POST to ``/``)."""
OTHER_PATH = "other"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})
CLIENT_CLOSED = 499  # metric code of a request whose client went away (nginx's convention), never a 5xx


@dataclass(frozen=True)
class EventServerSettings:
    header_timeout: float = 10.0  # aiohttp keep-alive timer: request head and idle connections
    body_read_timeout: float = 30.0  # whole body (Flux: ReadTimeout 30 s)
    lingering_time: float = 2.0  # unread body discarded after the answer, then close (aiohttp: 10 s)


def runner_kwargs(settings: EventServerSettings) -> dict[str, Any]:
    """Keyword arguments for ``web.AppRunner`` serving this app (also used for health and metrics)."""
    return {
        "access_log": None,
        "handler_cancellation": True,
        "keepalive_timeout": settings.header_timeout,
        "lingering_time": settings.lingering_time,
    }


def create_event_app(
    dispatcher: Dispatcher,
    limiter: FixedWindowLimiter,
    metrics: EventMetrics,
    *,
    ready: Callable[[], bool],
    shared_window: SharedDuplicateWindow | None = None,
    export_path_metrics: bool = False,
    settings: EventServerSettings | None = None,
) -> web.Application:
    body_read_timeout = (settings or EventServerSettings()).body_read_timeout

    # Metric children are cached: ``labels()`` cost more than the rest of the middleware (profile). Every
    # label value is from a fixed set (handler: KNOWN_PATHS + other; method: _METHODS + OTHER; code: HTTP
    # statuses), so the caches and the series stay bounded.
    inflight_children: dict[str, Any] = {}
    observed_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
    events_received = metrics.events_received

    def observed(label: str, method: str, code: str) -> tuple[Any, Any]:
        key = (label, method, code)
        children = observed_children.get(key)
        if children is None:
            labels = {"service": "", "handler": label, "method": method, "code": code}
            children = (metrics.http_duration.labels(**labels), metrics.http_size.labels(**labels))
            observed_children[key] = children
        return children

    async def handle(request: web.Request) -> web.StreamResponse:
        # The HTTP metrics, measured here rather than in a middleware: the only route is this handler, and
        # aiohttp's middleware chain cost ~2 µs per request more (issue 17, profile).
        label = path_label(request.path) if export_path_metrics else _HANDLER
        method = request.method if request.method in _METHODS else "OTHER"  # no free-form label values
        inflight = inflight_children.get(label)
        if inflight is None:
            inflight = inflight_children[label] = metrics.http_inflight.labels(service="", handler=label)
        inflight.inc()
        start = time.perf_counter()
        status = 500
        size = 0
        try:
            response = await process(request)
            status = response.status
            # body_length is only known once sent; the body (and so Content-Length) is known now
            size = response.content_length or 0
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:  # the client closed the connection (handler_cancellation)
            status = CLIENT_CLOSED
            raise
        finally:
            inflight.dec()
            duration, response_size = observed(label, method, str(status))
            duration.observe(time.perf_counter() - start)
            response_size.observe(size)

    async def read_body(request: web.Request) -> bytes:
        # A body that arrived with the request head is complete already (aiohttp's parser fed it and its
        # end before the handler ran): no timer needed. ``asyncio.timeout`` cost ~3 µs per event and leaves
        # a cancelled timer in the loop's heap each time (issue 17, profile).
        if request.content.is_eof():
            return await request.read()
        async with asyncio.timeout(body_read_timeout):
            return await request.read()

    async def process(request: web.Request) -> web.Response:
        if request.method != "POST":
            metrics.events_rejected.labels(reason="method").inc()
            return web.Response(status=405, headers={"Allow": "POST"})
        if request.content_length is not None and request.content_length > MAX_BODY:
            metrics.events_rejected.labels(reason="too_large").inc()
            return _closing(413)
        try:
            body = await read_body(request)
        except web.HTTPRequestEntityTooLarge:
            metrics.events_rejected.labels(reason="too_large").inc()
            return _closing(413)
        except TimeoutError:
            metrics.events_rejected.labels(reason="bad_request").inc()
            log.debug("rejecting event: body not received within %gs", body_read_timeout)
            return _closing(400)
        except (OSError, ValueError, RuntimeError):
            metrics.events_rejected.labels(reason="bad_request").inc()
            return _closing(400)
        try:
            event = Event.decode(body)
        except EventDecodeError as exc:
            metrics.events_rejected.labels(reason="bad_request").inc()
            log.debug("rejecting event: %s", exc)
            return web.Response(status=400, text=f"{exc}\n")
        cleaned = cleanup_metadata(event.metadata, event.object_group)
        if cleaned != event.metadata:
            event = event.model_copy(update={"metadata": cleaned})
        if not ready():
            metrics.events_rejected.labels(reason="not_ready").inc()
            return web.Response(status=503, headers={"Retry-After": "5"})
        key = event_key(event)
        if shared_window is None:
            decision = limiter.take(key)
        else:  # a durable store: the window is shared by every replica (dispatch/duplicates.py)
            try:
                decision = await shared_window.take(key)
            except StoreError as exc:
                return _store_unavailable(event, exc)
        headers = decision.headers()
        if not decision.allowed:
            metrics.events_rejected.labels(reason="rate_limited").inc()
            log.debug(
                "Discarding event, rate limiting duplicate events: %s", event.involved_object.describe()
            )
            headers["X-Content-Type-Options"] = "nosniff"
            return web.Response(status=429, text="Too Many Requests\n", headers=headers)
        try:
            await dispatcher.admit(event)
        except StoreError as exc:  # durable store unreachable: never 202-and-lose; the emitter retries
            if shared_window is not None:
                # the window ends by itself if even this fails; until then the retry is answered 429
                with contextlib.suppress(StoreError):
                    await shared_window.release(key)
            return _store_unavailable(event, exc)
        events_received.inc()
        return web.Response(status=202, headers=headers)

    def _store_unavailable(event: Event, exc: StoreError) -> web.Response:
        metrics.events_rejected.labels(reason="store_unavailable").inc()
        log.warning("refusing event for %s (503): %s", event.involved_object.describe(), exc)
        return web.Response(status=503, text="state store unavailable\n", headers={"Retry-After": "5"})

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def path_label(path: str) -> str:
    """The ``handler`` label of a request path with ``--export-http-path-metrics``: bounded, never the
    client's free choice."""
    return path if path in KNOWN_PATHS else OTHER_PATH


def _closing(status: int) -> web.Response:
    """A response after which the connection is closed (any unread body is discarded for at most
    ``lingering_time``, then the socket is closed)."""
    response = web.Response(status=status)
    response.force_close()
    return response

"""The web UI's listener (``--ui-addr``, off by default): server-rendered pages and a read-only JSON API.

What a user sees here: the objects' READY/STATUS, each Provider's health, dead letters, Silences, and the
history of decisions (issue 27 item 3). ``pages.py`` renders HTML (Jinja2, autoescape on, strict
undefined); ``api.py`` answers the same as JSON under ``/api/`` (the ``history --server`` command reads it);
``context.py`` is what both read.

This module is the listener's perimeter, applied to every answer — pages, the API, static files and
errors alike (a middleware and ``on_response_prepare``, so nothing bypasses it):

* **Security headers** (``HEADERS``): a CSP without inline script or style (``script-src 'self'``: only
  ``/static/live.js``), ``frame-ancestors 'none'`` (no clickjacking), ``nosniff``, no referrer to other sites
  (an event's URL carries ids), ``no-store`` (pages show live state and, with actions on, a CSRF token).
* **Host check against DNS rebinding**: a page that an attacker's site loads after pointing its own name at
  127.0.0.1 sends ``Host: attacker.example``; only the listener's own address, ``127.0.0.1``, ``localhost``,
  ``[::1]`` and ``--ui-allowed-hosts`` are answered, everything else is 403. A POST whose ``Origin`` is not
  this host is refused too (the browser's own cross-site check, before the CSRF token).
* **Methods**: GET and HEAD; POST only on the action routes (405 otherwise, from the router).
* **Errors**: a short plain-text answer, never a traceback.
* **Bounded**: request bodies (``MAX_BODY``, only the login and action forms have one), the history's page
  size (``pages.py``), live-stream subscribers (``context.StreamSlots``: beyond them, 503).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from .api import api_routes
from .context import UIContext
from .pages import page_routes

log = logging.getLogger(__name__)

MAX_BODY = 16 * 1024
"""Bytes a request body may have: a login or action form is under 1 KiB."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on the UI's own form
    # POSTs (Fetch, "serializing a request origin"), which the Origin check must refuse; same-origin still
    # sends nothing to another site (an event's URL carries ids)
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",  # browsers without frame-ancestors
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
STREAM_PATH = "/api/stream"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_name(host: str) -> str:
    """``Host`` header → the name without port, lower case, IPv6 without brackets (``[::1]:80`` → ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") > 1:  # a bare IPv6 address (no port can be told apart): as it is
        return host
    return host.partition(":")[0].rstrip(".")


def _own_address(request: web.Request) -> str:
    """The address this connection reached (the listener's own name when it listens on every interface)."""
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if isinstance(sockname, tuple) and sockname:
        try:
            return str(ipaddress.ip_address(str(sockname[0]).partition("%")[0]))
        except ValueError:
            return ""
    return ""


def host_allowed(request: web.Request, allowed: Iterable[str]) -> bool:
    name = host_name(request.host or "")
    if not name:
        return False
    return name in LOOPBACK_NAMES or name == _own_address(request) or name in allowed


def origin_allowed(request: web.Request) -> bool:
    """A state-changing request from a browser carries ``Origin``; it must be this very host (scheme, name
    and port as the ``Host`` header says). No ``Origin`` (curl with a bearer token) passes this check."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == (request.host or "").lower()


def create_ui_app(ctx: UIContext) -> web.Application:
    allowed = frozenset(host_name(h) for h in ctx.allowed_hosts if h)

    streams: set[asyncio.Task[Any]] = set()

    @web.middleware
    async def perimeter(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not host_allowed(request, allowed):
            log.debug("ui: refused Host %r", request.host)
            return plain(403, "Forbidden: this host name is not served here (see --ui-allowed-hosts).\n")
        if request.method not in ("GET", "HEAD") and not origin_allowed(request):
            return plain(403, "Forbidden: cross-origin request.\n")
        task = asyncio.current_task()
        if request.path == STREAM_PATH and task is not None:  # ended at shutdown, not waited for
            streams.add(task)
            task.add_done_callback(streams.discard)
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:  # redirects keep their Location
                raise
            text = exc.text if exc.text and exc.content_type == "text/plain" else exc.reason
            answer = plain(exc.status, text.rstrip("\n") + "\n")
            for name in ("Allow", "Retry-After"):
                if name in exc.headers:
                    answer.headers[name] = exc.headers[name]
            return answer

    async def secure(_: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(HEADERS)

    async def end_streams(_: web.Application) -> None:
        """Shutdown: a live stream never ends by itself; without this each open one held SIGTERM for the
        runner's whole shutdown timeout (measured: 10 s with one browser tab open)."""
        for task in list(streams):
            task.cancel()

    app = web.Application(middlewares=[perimeter], client_max_size=MAX_BODY, handler_args=None)
    app.on_response_prepare.append(secure)
    app.on_shutdown.append(end_streams)
    app[CONTEXT] = ctx
    app.add_routes(api_routes(ctx))  # first: its catch-all under /api/ answers JSON
    app.add_routes(page_routes(ctx))
    return app


def plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain", charset="utf-8")


CONTEXT = web.AppKey("ui-context", UIContext)

"""``/healthz`` (the loop is alive) and ``/readyz`` (the cache synced, we are not shutting down, and the
durable store can be written now).

``/readyz`` asks the store itself (``Store.ping``, a real write for SQLite, a JetStream round trip for
NATS) within ``PROBE_TIMEOUT``: a store another process has locked, a full disk or a dead writer thread
makes the pod unready, instead of answering 200 while every event POST fails (issue 23 item 4).

``/status`` (``?kind=Alert|Provider|Receiver|Silence``) answers what ``flux get`` shows, from the controller's
own cache: for each object its kind, namespace, name, Ready status and message, and whether it is suspended
(a Silence: its state, end and held count instead), as JSON. It is what ``notification-controller get`` reads in local mode, where no API server holds a status
(issue 25 item 7). Read-only, GET only, no spec and no Secret in it: a Receiver's webhook path (a bearer
secret, which Flux writes into the Ready message, "Receiver initialized for path: /hook/…") is masked here:
this listener has no authentication, unlike the API server that shows it to ``flux get receivers``; other
condition messages are masked where they are written (THREAT_MODEL.md).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiohttp import web

from ..errors import StoreError

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 0.8
"""Seconds ``/readyz`` waits for the store: under the kubelet's default probe timeout (1 s), so a store
that does not answer is a 503, not a probe timeout counted the same way but without a reason."""


_HOOK_PATH = re.compile(r"/hook/[^\s\"']+")

STATUS_KINDS = ("Alert", "Provider", "Receiver", "Silence")
WAITING = "waiting to be reconciled"
"""Flux's words (``flux get``'s ``statusAndMessage``) for an object with no Ready condition yet."""


def summarise(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One row of ``flux get``, from an object as the API server stores it (camelCase, ``status.conditions``).
    Works on what an API server returns and on the cache's models dumped by alias, so both modes agree."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    ready, message, reason = "False", WAITING, ""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            ready = str(condition.get("status", "Unknown"))
            message = str(condition.get("message", ""))
            reason = str(condition.get("reason", ""))
            break
    row = {
        "kind": str(raw.get("kind", "")),
        "namespace": str(meta.get("namespace", "")),
        "name": str(meta.get("name", "")),
        "ready": ready,
        "reason": reason,
        "message": message,
        "suspended": bool(spec.get("suspend", False)),
        "created": str(meta.get("creationTimestamp") or ""),
    }
    if row["kind"] == "Silence":  # what `kubectl get silences` prints (the CRD's columns)
        held = status.get("held")
        row.update(
            state=str(status.get("state") or ""),
            ends=str(status.get("endsAt") or ""),
            held=held if isinstance(held, int) and not isinstance(held, bool) else 0,
        )
    return row


def status_rows(objects: Iterable[Mapping[str, Any]], kind: str = "") -> list[dict[str, Any]]:
    """The rows of ``/status`` (and of the web UI's overview), sorted, a Receiver's webhook path masked."""
    rows = [summarise(raw) for raw in objects if not kind or raw.get("kind") == kind]
    for row in rows:
        row["message"] = _HOOK_PATH.sub("/hook/***", row["message"])
    rows.sort(key=lambda row: (row["kind"], row["namespace"], row["name"]))
    return rows


def create_health_app(
    ready: Callable[[], bool],
    probe: Callable[[], Awaitable[None]] | None = None,
    objects: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
) -> web.Application:
    """``objects``: the Alerts, Providers and Receivers of the cache as API-server-shaped mappings
    (``/status``); without it ``/status`` is 404."""

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

    async def status(request: web.Request) -> web.Response:
        kind = request.query.get("kind", "")
        if kind and kind not in STATUS_KINDS:
            return web.json_response({"error": f"kind must be one of {', '.join(STATUS_KINDS)}"}, status=400)
        assert objects is not None
        return web.json_response({"items": status_rows(objects(), kind)})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if objects is not None:
        app.router.add_get("/status", status)
    return app

"""The web UI's pages: server-rendered HTML, complete without JavaScript (issue 27 item 3).

* ``/`` — the overview: Alerts, Providers and Receivers with READY/STATUS (the rows of ``/status``), each
  Provider's health, dead letters, active Silences;
* ``/events`` — recent events, newest first, each with its per-Alert decisions; ``object``, ``alert``,
  ``provider`` and ``outcome`` query parameters filter them (a plain GET form sets them);
* ``/events/<eventId>`` — one event: its decisions, notifications, attempts and errors;
* ``/notifications/<id>`` — one notification: what was sent (the masked request summary), to which
  Provider, each attempt and the answer;
* ``/objects/<Kind>/<namespace>/<name>`` — an object's history (an Alert's or a Provider's decisions; for
  any other kind, the events about it).

Every value comes from outside — an event's message and metadata from whoever could POST, an object's name
from a tenant, an error from a provider's answer — so the templates escape everything (Jinja2 autoescape on
HTML, ``StrictUndefined`` so a misspelt field is an error, not an empty cell) and no template marks anything
``safe``. Secrets never reach a page: the history holds masked text only (the recorder masks it), a
Receiver's webhook path is masked in the status rows (server/health.py), a Provider's address is never
shown. ``/static/live.js`` (no inline script: the CSP forbids it) prepends new decisions from the live
stream; without it the pages are whole and a "refresh" link reloads them.

The history is queried with a bounded ``limit`` (``PAGE_LIMIT``, at most ``history.MAX_LIMIT``); a
parameter longer than ``MAX_PARAM`` is a 400, not a query.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from aiohttp import web

from ...history import MAX_LIMIT, OUTCOMES, Query, Record
from . import context
from .actions import Guard, action_routes
from .context import UIContext

PAGE_LIMIT = 200
"""Decisions a page shows by default (``?limit=`` up to ``history.MAX_LIMIT``)."""
MAX_PARAM = 512
"""Characters a filter parameter may have (an object reference is far shorter)."""
MAX_OBJECT_ROWS = 2000
"""Alerts, Providers and Receivers the overview lists (a page of 10,000 rows helps nobody; ``get`` lists all)."""
FILTERS = ("object", "alert", "provider", "outcome")
OBJECT_KINDS_BY_ROLE = {"Alert": "alert", "Provider": "provider"}
"""Kinds whose page lists the decisions they made (``alert=``/``provider=``) rather than the events about them."""


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("notification_controller.server.ui", "templates"),
        autoescape=True,  # every template is HTML: escape every value, whatever the file name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["age"] = age
    env.filters["ms"] = milliseconds
    env.filters["ref"] = quote_ref
    env.filters["ref_ns"] = quote_ns
    env.globals["object_path"] = object_path
    return env


def when(epoch: float | None) -> str:
    """Epoch seconds → ``2026-11-27 10:49:21Z`` (UTC, the logs' zone); ``—`` for None."""
    if epoch is None:
        return "—"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:.0f}s"


def milliseconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return ""
    return f"{value:.0f} ms"


def quote_ref(value: str) -> str:
    """A path segment (an id, a name): percent-encoded, slashes included."""
    return quote(value, safe="")


def quote_ns(value: str) -> str:
    """``namespace/name`` → two percent-encoded path segments (an Alert's or a Provider's page)."""
    namespace, _, name = value.partition("/")
    return f"{quote(namespace, safe='')}/{quote(name, safe='')}"


def object_path(ref: str) -> str:
    """``Kind/namespace/name`` → its page's path, or "" when ``ref`` is not of that shape."""
    parts = ref.split("/")
    if len(parts) != 3 or not all(parts):
        return ""
    return "/objects/" + "/".join(quote(p, safe="") for p in parts)


@dataclass
class EventGroup:
    """One event and the decisions recorded about it (newest decision first)."""

    event_id: str
    first: Record
    records: list[Record] = field(default_factory=list)

    @property
    def time(self) -> float:
        return min(r.time for r in self.records)


def group_by_event(records: Iterable[Record]) -> list[EventGroup]:
    """Records (newest first) → events in the order of their newest decision, each with its records."""
    groups: dict[str, EventGroup] = {}
    for r in records:
        key = r.event_id or r.id  # an event-level record without an event id stands alone
        group = groups.get(key)
        if group is None:
            group = groups[key] = EventGroup(r.event_id, r)
        group.records.append(r)
    return list(groups.values())


def _param(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if len(value) > MAX_PARAM:
        raise web.HTTPBadRequest(text=f"{name}: longer than {MAX_PARAM} characters")
    return value


def _limit(request: web.Request) -> int:
    raw = _param(request, "limit")
    if not raw:
        return PAGE_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text="limit: not a number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise web.HTTPBadRequest(text=f"limit: between 1 and {MAX_LIMIT}")
    return limit


class Pages:
    def __init__(self, ctx: UIContext) -> None:
        self.ctx = ctx
        self.env = _environment()
        self.now: Callable[[], float] = time.time
        self.guard = Guard(ctx.actions)

    def render(self, name: str, request: web.Request, **values: Any) -> web.Response:
        template = self.env.get_template(name)
        signed_in, csrf = self.guard.session(request)
        common = {
            "path": request.path if request.method in ("GET", "HEAD") else "/",
            "history_on": self.ctx.history is not None,
            "actions_on": self.ctx.actions is not None,
            "outcomes": sorted(OUTCOMES),
            "now": self.now(),
            "csrf": csrf,
            "signed_in": signed_in,
            "live": "",
            "notice": "",
        }
        common.update(values)
        return web.Response(text=template.render(**common), content_type="text/html", charset="utf-8")

    async def _query(self, q: Query) -> list[Record]:
        if self.ctx.history is None:
            return []
        return await self.ctx.history.query(q)

    # ---- pages ---------------------------------------------------------------------------------------
    async def overview(self, request: web.Request) -> web.Response:
        rows = self.ctx.status()
        objects = [r for r in rows if r["kind"] in ("Alert", "Provider", "Receiver")]
        return self.render(
            "overview.html",
            request,
            objects=objects[:MAX_OBJECT_ROWS],
            more_objects=max(0, len(objects) - MAX_OBJECT_ROWS),
            providers=await context.provider_health(self.ctx),
            durable=self.ctx.store is not None,
            dead_letters=await context.dead_letters(self.ctx),
            silences=context.silences(self.ctx),
        )

    async def events(self, request: web.Request) -> web.Response:
        filters = {name: _param(request, name) for name in FILTERS}
        if filters["outcome"] and filters["outcome"] not in OUTCOMES:
            raise web.HTTPBadRequest(text=f"outcome: one of {', '.join(sorted(OUTCOMES))}")
        limit = _limit(request)
        records = await self._query(
            Query(
                object=filters["object"],
                alert=filters["alert"],
                provider=filters["provider"],
                outcome=filters["outcome"],
                limit=limit,
            )
        )
        return self.render(
            "events.html",
            request,
            filters=filters,
            groups=group_by_event(records),
            limit=limit,
            full=len(records) >= limit,
            live=urlencode({k: v for k, v in filters.items() if v}) or "all",
        )

    async def event(self, request: web.Request) -> web.Response:
        event_id = request.match_info["event_id"]
        records = await self._query(Query(event_id=event_id, limit=MAX_LIMIT))
        if not records:
            raise web.HTTPNotFound(text="No such event in the history (it may have been rotated out).")
        groups = group_by_event(records)
        notifications = _by_notification(records)
        return self.render("event.html", request, group=groups[0], notifications=notifications)

    async def notification(self, request: web.Request) -> web.Response:
        notification_id = request.match_info["notification_id"]
        records = await self._query(Query(notification_id=notification_id, limit=MAX_LIMIT))
        if not records:
            raise web.HTTPNotFound(text="No such notification in the history (it may have been rotated out).")
        attempts = sorted(records, key=lambda r: (r.time, r.id))
        last = attempts[-1]
        request_summary = next((r.request for r in reversed(attempts) if r.request), "")
        return self.render(
            "notification.html",
            request,
            notification_id=notification_id,
            last=last,
            attempts=attempts,
            request_summary=request_summary,
        )

    async def object(self, request: web.Request) -> web.Response:
        kind, namespace, name = (request.match_info[k] for k in ("kind", "namespace", "name"))
        for value in (kind, namespace, name):
            if len(value) > MAX_PARAM:
                raise web.HTTPBadRequest(text=f"longer than {MAX_PARAM} characters")
        ref = f"{kind}/{namespace}/{name}"
        role = OBJECT_KINDS_BY_ROLE.get(kind, "object")
        key = f"{namespace}/{name}" if role != "object" else ref
        limit = _limit(request)
        if role == "alert":
            query = Query(alert=key, limit=limit)
        elif role == "provider":
            query = Query(provider=key, limit=limit)
        else:
            query = Query(object=key, limit=limit)
        records = await self._query(query)
        status = [
            r
            for r in self.ctx.status()
            if r["kind"] == kind and r["namespace"] == namespace and r["name"] == name
        ]
        return self.render(
            "object.html",
            request,
            ref=ref,
            kind=kind,
            status=status[0] if status else None,
            groups=group_by_event(records),
            limit=limit,
            full=len(records) >= limit,
            live=urlencode({role: key}),
        )


def _by_notification(records: Iterable[Record]) -> list[list[Record]]:
    """An event's records by notification (oldest attempt first); decisions without one stand alone."""
    out: dict[str, list[Record]] = {}
    for r in sorted(records, key=lambda r: (r.time, r.id)):
        out.setdefault(r.notification_id or r.id, []).append(r)
    return list(out.values())


def _static_files() -> dict[str, tuple[bytes, str]]:
    """The static files, read once (a few KB): served from memory, so the installed wheel needs no
    file-system layout beyond its package data."""
    root = resources.files("notification_controller.server.ui") / "static"
    types = {"live.js": "text/javascript", "ui.css": "text/css", "favicon.svg": "image/svg+xml"}
    return {name: (root.joinpath(name).read_bytes(), ctype) for name, ctype in types.items()}


def page_routes(ctx: UIContext) -> list[web.RouteDef]:
    pages = Pages(ctx)
    files = _static_files()

    async def static(request: web.Request) -> web.Response:
        found = files.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound(text="Not found.")
        body, ctype = found
        return web.Response(body=body, content_type=ctype, charset="utf-8")

    routes = [
        web.get("/", pages.overview),
        web.get("/events", pages.events),
        web.get("/events/{event_id}", pages.event),
        web.get("/notifications/{notification_id}", pages.notification),
        web.get("/objects/{kind}/{namespace}/{name}", pages.object),
        web.get("/static/{name}", static),
        *action_routes(ctx, pages.guard, pages.render),
    ]
    return routes

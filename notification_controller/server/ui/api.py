"""The UI listener's read-only JSON API under ``/api/``: the history of decisions and the overview as data.

``notification-controller history --server`` reads it, and so can any script (issue 27 item 2): the same
answers the pages show, without scraping HTML. Everything here is read-only, GET and HEAD only (any other
method is a 405 with ``Allow``), and every answer is JSON — errors too: ``{"error": "..."}`` naming the
parameter that was wrong (400), the thing that was not found (404), a store that did not answer in time
(503); never a traceback.

* ``/api/history?object=&alert=&provider=&outcome=&event=&notification=&since=&until=&limit=`` →
  ``{"items": [record, ...]}``, newest first (``history.model.Query``; ``since``/``until`` a Go duration
  back from now, ``1h``, or an RFC 3339 time; ``limit`` 1 to 1000, default 100);
* ``/api/events/<eventId>`` and ``/api/notifications/<id>`` → ``{"eventId"|"notificationId": ..., "records":
  [...]}`` (404 when the history has none);
* ``/api/overview`` → the objects' READY/STATUS rows (``/status``'s), each Provider's health, the newest
  dead letters and the Silences that are not expired (``context.py`` computes them for the pages too);
  times as RFC 3339;
* ``/api/stream`` → server-sent events, ``event: record`` with a record as ``data`` for each decision from
  now on (optionally filtered like ``/api/history``), a comment every ``HEARTBEAT`` seconds.

Bounded, since anyone who reaches the listener may call it: query values are at most ``MAX_VALUE``
characters, a query answers at most 1000 records, at most ``MAX_QUERIES`` run at once and each waits at most
``QUERY_TIMEOUT`` for its turn and the store; live streams are counted (``context.StreamSlots``; one more is a 503), each reads the history's bounded
per-subscriber queue (a slow reader misses records, the recorder never waits), and a client that does not
read what it is sent within ``WRITE_TIMEOUT`` is disconnected: its socket buffers are all it can hold.
Records are masked when they are built (``history.model``), so nothing here needs masking again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from ...errors import StoreError
from ...history.model import MAX_LIMIT, OUTCOMES, Query, Record, parse_rfc3339, rfc3339_ms
from ...lib.duration import parse_duration
from .context import UIContext, dead_letters, provider_health, silences

log = logging.getLogger(__name__)

MAX_VALUE = 512
"""Characters a query parameter may have (an object reference is well under 300; the pages' filters too)."""
QUERY_TIMEOUT = 10.0
"""Seconds a history query may take (a durable store's) before the answer is a 503."""
MAX_QUERIES = 4
"""History queries running at once; more wait for a turn (within ``QUERY_TIMEOUT``). Each holds up to 1,000
records and, on NATS, a window of the stream being read: a flood of queries costs time, not memory."""
HEARTBEAT = 15.0
"""Seconds between comments on an idle live stream: proxies keep the connection, a gone client is noticed."""
WRITE_TIMEOUT = 10.0
"""Seconds one write to a live stream may wait for the client to read; past it the client is dropped."""
DEFAULT_LIMIT = 100
MAX_BACK = 100 * 365 * 24 * 3600.0
"""The longest duration ``since``/``until`` may go back (a 400-digit one is infinity, which no store can seek)."""

FILTERS = {
    "object": "object",
    "alert": "alert",
    "provider": "provider",
    "outcome": "outcome",
    "event": "event_id",
    "notification": "notification_id",
}
"""Query parameter -> ``Query`` field (exact matches)."""
TIMES = ("since", "until")
HISTORY_PARAMS = frozenset({*FILTERS, *TIMES, "limit"})
STREAM_PARAMS = frozenset(FILTERS)

_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_SHAPES = {
    "object": (3, "KIND/NAMESPACE/NAME"),
    "alert": (2, "NAMESPACE/NAME"),
    "provider": (2, "NAMESPACE/NAME"),
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ParamError(ValueError):
    """A query parameter is wrong; the message names it (``since: ...``)."""


def parse_time(name: str, value: str, now: float) -> float:
    """Epoch seconds of ``value``: a Go duration back from ``now`` (``1h``, ``90m``) or an RFC 3339 time."""
    text = value.strip()
    try:
        back = parse_duration(text)
    except ValueError:
        pass
    else:
        if back > MAX_BACK:
            raise ParamError(f"{name}: {value[:64]!r} is more than 100 years back")
        return now - back
    try:
        return parse_rfc3339(text)
    except (ValueError, OverflowError):
        raise ParamError(
            f"{name}: {value[:64]!r} is neither a duration (30s, 5m, 1h30m) nor an RFC 3339 time "
            "(2026-11-27T10:00:00Z)"
        ) from None


def check_value(name: str, value: str) -> str:
    """``value`` of the filter ``name`` as a ``Query`` wants it; raises ``ParamError`` naming ``name``."""
    if len(value) > MAX_VALUE:
        raise ParamError(f"{name}: longer than {MAX_VALUE} characters")
    if name == "outcome":
        if value not in OUTCOMES:
            raise ParamError(f"outcome: {value[:64]!r} is not one of {', '.join(sorted(OUTCOMES))}")
    elif name in _SHAPES:
        parts, shape = _SHAPES[name]
        pieces = value.split("/")
        if len(pieces) != parts or not all(pieces):
            raise ParamError(f"{name}: {value[:64]!r} is not {shape}")
    elif not _ID.match(value):
        raise ParamError(f"{name}: {value[:64]!r} is not an id (letters, digits, '.', '_', ':', '-')")
    return value


def query_from_params(
    params: Mapping[str, str], now: float, *, allowed: frozenset[str] = HISTORY_PARAMS
) -> Query:
    """The ``Query`` that ``params`` (``/api/history``'s, or the CLI's flags) ask for. An empty value is no
    filter; an unknown parameter, a repeated one or a bad value raises ``ParamError`` naming it."""
    fields: dict[str, Any] = {}
    seen: set[str] = set()
    for name, value in params.items():
        if name not in allowed:
            raise ParamError(f"{name[:64]}: unknown parameter (known: {', '.join(sorted(allowed))})")
        if name in seen:
            raise ParamError(f"{name}: given more than once")
        seen.add(name)
        if not value:
            continue
        if name in FILTERS:
            fields[FILTERS[name]] = check_value(name, value)
        elif name in TIMES:
            fields[name] = parse_time(name, value, now)
        else:  # limit
            try:
                limit = int(value)
            except ValueError:
                raise ParamError(f"limit: {value[:64]!r} is not a number") from None
            if not 1 <= limit <= MAX_LIMIT:
                raise ParamError(f"limit: must be between 1 and {MAX_LIMIT}, got {limit}")
            fields["limit"] = limit
    since, until = fields.get("since"), fields.get("until")
    if since is not None and until is not None and until < since:
        raise ParamError("until: earlier than since")
    fields.setdefault("limit", DEFAULT_LIMIT)
    return Query(**fields)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode(),
        content_type="application/json",
    )


def error(status: int, message: str, **headers: str) -> web.Response:
    answer = _json({"error": message}, status)
    answer.headers.update(headers)
    return answer


def _time(epoch: Any) -> Any:
    return rfc3339_ms(epoch) if isinstance(epoch, int | float) and not isinstance(epoch, bool) else epoch


def api_routes(ctx: UIContext) -> list[web.RouteDef]:
    """The ``/api/`` routes of the UI listener (``server/ui/__init__.py`` adds them)."""

    def now() -> float:
        return ctx.clock.now().timestamp()

    queries = asyncio.Semaphore(MAX_QUERIES)

    async def query(q: Query) -> list[Record]:
        assert ctx.history is not None
        async with asyncio.timeout(QUERY_TIMEOUT), queries:  # waiting for a turn counts in the timeout
            return await ctx.history.query(q)

    def endpoint(handler: Handler) -> Handler:
        """GET and HEAD only; every failure a JSON answer."""

        async def wrapped(request: web.Request) -> web.StreamResponse:
            if request.method not in ("GET", "HEAD"):
                return error(
                    405, f"method {request.method[:16]} not allowed: the API is read-only", Allow="GET, HEAD"
                )
            try:
                return await handler(request)
            except ParamError as exc:
                return error(400, str(exc))
            except (StoreError, TimeoutError) as exc:
                log.debug("ui api: history unavailable: %s", exc or "no answer in time")
                return error(503, "the history store did not answer; try again", **{"Retry-After": "5"})
            except ConnectionError:
                raise
            except Exception as exc:  # a bug must not show a traceback to a client
                log.error("ui api: %s failed: %s", request.path[:64], type(exc).__name__, exc_info=True)
                return error(500, "internal error")

        return wrapped

    def history_off() -> web.Response:
        return error(404, "the history is off (--history=false)")

    async def history(request: web.Request) -> web.StreamResponse:
        q = query_from_params(_single(request), now())
        if ctx.history is None:
            return history_off()
        return _json({"items": [r.to_json() for r in await query(q)]})

    def by_id(key: str, what: str) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            if request.query:
                raise ParamError(
                    f"{next(iter(request.query))[:64]}: unknown parameter (this path takes none)"
                )
            ident = check_value(key, request.match_info["id"])
            if ctx.history is None:
                return history_off()
            q = (
                Query(event_id=ident, limit=MAX_LIMIT)
                if key == "event"
                else Query(notification_id=ident, limit=MAX_LIMIT)
            )
            records = await query(q)
            if not records:
                return error(404, f"no records of {what} {ident!r} (kept for --history-max-age)")
            return _json({key + "Id": ident, "records": [r.to_json() for r in records]})

        return handler

    async def overview(request: web.Request) -> web.StreamResponse:
        if request.query:
            raise ParamError(f"{next(iter(request.query))[:64]}: unknown parameter (this path takes none)")
        providers = await provider_health(ctx)
        for row in providers:
            row["lastSuccess"], row["lastFailure"] = _time(row["lastSuccess"]), _time(row["lastFailure"])
        letters = await dead_letters(ctx)
        for row in letters:
            row["deadAt"] = _time(row["deadAt"])
        return _json(
            {
                "objects": ctx.status(),
                "providers": providers,
                "deadLetters": letters,
                "silences": silences(ctx),
                "history": ctx.history is not None,
            }
        )

    async def stream(request: web.Request) -> web.StreamResponse:
        q = query_from_params(_single(request), now(), allowed=STREAM_PARAMS)
        if ctx.history is None:
            return history_off()
        if not ctx.streams.acquire():
            log.debug("ui api: live stream refused: %d open", ctx.streams.taken)
            return error(
                503,
                f"too many live streams open (at most {ctx.streams.limit}); try again later",
                **{"Retry-After": "10"},
            )
        try:
            answer = web.StreamResponse(
                headers={"Content-Type": "text/event-stream; charset=utf-8", "X-Accel-Buffering": "no"}
            )
            await answer.prepare(request)
            if request.method == "HEAD":
                return answer
            if not await _tail(answer, ctx.history.subscribe(), q) and request.transport is not None:
                request.transport.abort()  # what it did not read is discarded with the connection
            return answer
        finally:
            ctx.streams.release()

    async def not_found(request: web.Request) -> web.StreamResponse:
        return error(404, f"no such API path: {request.path[:128]}")

    routes = [
        ("/api/history", history),
        ("/api/events/{id}", by_id("event", "event")),
        ("/api/notifications/{id}", by_id("notification", "notification")),
        ("/api/overview", overview),
        ("/api/stream", stream),
        ("/api", not_found),
        ("/api/{tail:.*}", not_found),
    ]
    return [web.route("*", path, endpoint(handler)) for path, handler in routes]


def _single(request: web.Request) -> dict[str, str]:
    """The query as a dict; a repeated parameter is an error (``Query`` takes one value of each)."""
    params: dict[str, str] = {}
    for name, value in request.query.items():
        if name in params:
            raise ParamError(f"{name[:64]}: given more than once")
        params[name] = value
    return params


async def _write(answer: web.StreamResponse, data: bytes) -> None:
    async with asyncio.timeout(WRITE_TIMEOUT):
        await answer.write(data)


async def _tail(answer: web.StreamResponse, records: AsyncIterator[Record], q: Query) -> bool:
    """Write each record ``q`` matches as an ``event: record``; a comment every ``HEARTBEAT`` seconds. Ends
    when the history closes the subscription or the client goes away (True), or when the client does not
    read within ``WRITE_TIMEOUT`` (False: the caller drops the connection). The pending read is a task that survives the heartbeat's wait: cancelling the
    subscription's ``__anext__`` would end it."""
    pending: asyncio.Future[Record] | None = None
    filtered = any((q.object, q.alert, q.provider, q.outcome, q.event_id, q.notification_id))
    try:
        await _write(answer, b"retry: 3000\n: live decisions from now on\n\n")
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(records))
            done, _ = await asyncio.wait((pending,), timeout=HEARTBEAT)
            if not done:
                await _write(answer, b": keepalive\n\n")
                continue
            try:
                record = pending.result()
            except StopAsyncIteration:
                pending = None
                return True
            pending = None
            if filtered and not q.matches(record):
                continue
            data = json.dumps(record.to_json(), ensure_ascii=True, separators=(",", ":"))
            await _write(answer, f"event: record\nid: {record.id}\ndata: {data}\n\n".encode())
    except TimeoutError:
        log.debug("ui api: live stream dropped: the client did not read for %gs", WRITE_TIMEOUT)
        return False
    except ConnectionError:
        log.debug("ui api: live stream closed by the client")
        return True
    except (
        Exception
    ) as exc:  # the history's tail failed (a store error): end this stream, EventSource retries
        log.warning("ui api: live stream ended: the history's tail failed: %s", type(exc).__name__)
        return True
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        aclose = getattr(records, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(RuntimeError):
                await aclose()

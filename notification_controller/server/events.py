"""The event ingest server on ``--events-addr`` (reference §3.1–3.3).

Pipeline per request, as Flux: body ≤ 3 MiB (413) → JSON decode (400) → metadata cleanup →
duplicate limiter (429 with ``X-RateLimit-*``/``Retry-After``) → hand-off → 202 with an empty body.
Deliberate differences (documented in README "Compatibility"):
* only ``POST`` is accepted (405 otherwise; Flux accepts any method, producers only POST);
* until the object cache has synced, and while shutting down, the answer is 503, not 202: Flux's
  producers retry a 503, whereas a 202 from an empty cache silently loses the event (checklist C3/D10).

The HTTP/1.1 server is ``server/http1.py`` (llhttp via ``httptools``), not aiohttp's: it costs a quarter of
aiohttp's CPU per request, and with the memory store an event is answered without a task (issue 17). Slow
clients (checklist B7; Flux: ReadHeaderTimeout 10 s, ReadTimeout 30 s): a request head must arrive within
``header_timeout`` (10 s) of the accept or of the previous answer — a silent client, one trickling its headers
and an idle keep-alive connection are closed; the body within ``body_read_timeout`` (30 s) → 400, and the
connection is closed after at most ``lingering_time`` (2 s, as Go discards a bounded rest of the body). An
oversized (413) or unparsable (400) request also closes the connection.

``--export-http-path-metrics`` labels the HTTP metrics with the request path, as Flux does, but only paths
the event server knows (``KNOWN_PATHS``: ``/``, where Flux's controllers POST) get their own ``handler``
value; every other path counts as ``other``. The path is the client's to choose, and Flux's label is
unbounded: 100,000 random paths were 100,000 new series per metric (issue 11 item 6).

The history (issue 27, ``history/``): what is decided here is recorded here — a duplicate (429) as
``duplicate``, a refusal (400, 405, 413, 503...) as ``refused`` with the rejection reason (within the
recorder's refusal budget: a flood of bad POSTs cannot push the useful records out). An admitted event is
recorded by the pipeline. Recording is a synchronous append: the answer never waits for it.

Tracing (``--otlp-endpoint``, docs/tracing.md): each request is a server span, continuing the W3C
``traceparent`` the client sent (a Flux controller instrumented with OpenTelemetry, a CI job), with the
event's object, reason and severity (masked, bounded) and the answer's status; it is ``tracing.CURRENT``
while the event is matched and prepared, so matching, the stages that act and the queue are its children.
Off, ``__call__`` is the untraced handler: one boolean read per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..api.event import Event, EventDecodeError
from ..core.metadata import cleanup_metadata
from ..core.ratelimit import FixedWindowLimiter, event_key
from ..dispatch.duplicates import SharedDuplicateWindow
from ..dispatch.model import new_id
from ..errors import StoreError
from ..history.model import Outcome
from ..history.recorder import Recorder
from ..metrics import EventMetrics, Observe, loop_counter, loop_histogram
from ..tracing import NOOP, Tracer, current
from .http1 import HTTPServer, Request, Response, ServerLimits
from .spans import CLIENT_CLOSED, serve_traced

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
_HANDLER = "/"
KNOWN_PATHS = frozenset({_HANDLER})
"""Paths reported as themselves with ``--export-http-path-metrics`` (Flux's controllers POST to ``/``)."""
OTHER_PATH = "other"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})
# answers the HTTP server gives by itself (server/http1.py), by the reason they are counted under
_REJECTED_BY_SERVER = {413: "too_large"} | dict.fromkeys((400, 417, 431, 501), "bad_request")


@dataclass(frozen=True)
class EventServerSettings:
    header_timeout: float = 10.0  # request head within this of the accept or the last answer; idle keep-alive
    body_read_timeout: float = 30.0  # whole body (Flux: ReadTimeout 30 s)
    lingering_time: float = 2.0  # unread body discarded after the answer, then close (aiohttp: 10 s)

    def limits(self) -> ServerLimits:
        return ServerLimits(
            max_body=MAX_BODY,
            header_timeout=self.header_timeout,
            body_timeout=self.body_read_timeout,
            lingering_time=self.lingering_time,
        )


def runner_kwargs(settings: EventServerSettings) -> dict[str, Any]:
    """Keyword arguments for ``web.AppRunner`` serving an aiohttp app with the event server's connection
    limits (the health and metrics servers)."""
    return {
        "access_log": None,
        "handler_cancellation": True,
        "keepalive_timeout": settings.header_timeout,
        "lingering_time": settings.lingering_time,
    }


class Admission(Protocol):
    """``dispatch.Dispatcher``: the number of Alerts matched now (the memory store), or an awaitable that
    ends once the event's notifications are stored (a durable store; ``StoreError`` when it cannot)."""

    def admit(self, event: Event, /) -> int | Awaitable[int]: ...


class EventEndpoint:
    """The event endpoint: a request in, an answer out. With the memory store everything up to the 202 is
    synchronous (no task, no await); a durable store's duplicate window and outbox are awaited on a task."""

    def __init__(
        self,
        dispatcher: Admission,
        limiter: FixedWindowLimiter,
        metrics: EventMetrics,
        *,
        ready: Callable[[], bool],
        shared_window: SharedDuplicateWindow | None = None,
        export_path_metrics: bool = False,
        history: Recorder | None = None,
        tracer: Tracer = NOOP,
        mask: Callable[[str], str] = str,
    ) -> None:
        self.dispatcher = dispatcher
        self.tracer = tracer
        self.tracing = tracer.enabled
        self.mask = mask  # the Redactor: span attributes are masked as log lines are
        self.history = history
        self.limiter = limiter
        self.metrics = metrics
        self.ready = ready
        self.shared_window = shared_window
        self.export_path_metrics = export_path_metrics
        self._events_received = loop_counter(metrics.events_received)  # lock-free: metrics.LoopCounter
        # Metric children are cached: ``labels()`` cost more than the rest of the bookkeeping (profile). Every
        # label value is from a fixed set (handler: KNOWN_PATHS + other; method: _METHODS + OTHER; code: HTTP
        # statuses), so the caches and the series stay bounded.
        self._inflight: dict[str, Any] = {}
        self._observed: dict[tuple[str, str, int], tuple[Observe, Observe]] = {}

    def server(self, settings: EventServerSettings | None = None) -> HTTPServer:
        """The event server answering with this endpoint (not yet listening: ``await server.start(host, port)``)."""
        return HTTPServer(self, (settings or EventServerSettings()).limits())

    # ---- the HTTP server's Handler -----------------------------------------------------------------------
    def __call__(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        if self.tracing:
            return self._traced(request)
        return self._handle(request)

    def _handle(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        start = time.perf_counter()
        try:
            result = self.process(request)
        except Exception:
            self._observe(request, 500, 0, start)
            raise
        if isinstance(result, Response):
            # answered without yielding to the loop: no scrape can see it in flight, so the gauge is not moved
            self._observe(request, result.status, len(result.body), start)
            return result
        return self._finish(request, result, start)

    def _traced(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        """``_handle`` in a server span (``spans.py``)."""
        method = request.method if request.method in _METHODS else "OTHER"
        attributes = {"http.request.method": method, "url.path": path_label(request.path)}
        return serve_traced(self.tracer, f"{method} {_HANDLER}", request, attributes, self._handle)

    def refused(self, request: Request, status: int) -> Response:
        """Answers the HTTP server gives itself (413 body too large; 400 body too slow, Host missing or
        repeated, ambiguous framing; 417 an unknown expectation; 501 a transfer coding before chunked) and
        requests whose client left before the answer (499, nothing is sent)."""
        reason = _REJECTED_BY_SERVER.get(status)
        if reason is not None:
            self.metrics.events_rejected.labels(reason=reason).inc()
            log.debug("rejecting event: the HTTP server answered %d", status)
            if self.history is not None:
                self.history.refused(None, new_id(), status, reason, f"the HTTP server answered {status}")
        response = Response(status, close=True)
        self._observe(request, status, 0, time.perf_counter())
        return response

    async def _finish(
        self, request: Request, pending: Coroutine[Any, Any, Response], start: float
    ) -> Response:
        label = self._label(request)
        inflight = self._inflight.get(label)
        if inflight is None:
            inflight = self._inflight[label] = self.metrics.http_inflight.labels(service="", handler=label)
        inflight.inc()
        status, size = 500, 0
        try:
            response = await pending
            status, size = response.status, len(response.body)
            return response
        except asyncio.CancelledError:  # the client closed the connection
            status = CLIENT_CLOSED
            raise
        finally:
            inflight.dec()
            self._observe(request, status, size, start)

    def _label(self, request: Request) -> str:
        return path_label(request.path) if self.export_path_metrics else _HANDLER

    def _observe(self, request: Request, status: int, size: int, start: float) -> None:
        method = request.method if request.method in _METHODS else "OTHER"  # no free-form label values
        key = (self._label(request), method, status)
        children = self._observed.get(key)
        if children is None:
            labels = {"service": "", "handler": key[0], "method": method, "code": str(status)}
            children = (
                loop_histogram(self.metrics.http_duration.labels(**labels)),
                loop_histogram(self.metrics.http_size.labels(**labels)),
            )
            self._observed[key] = children
        children[0].observe(time.perf_counter() - start)
        children[1].observe(size)

    # ---- the endpoint --------------------------------------------------------------------------------------
    def process(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        metrics = self.metrics
        if request.method != "POST":
            metrics.events_rejected.labels(reason="method").inc()
            if self.history is not None:
                self.history.refused(None, new_id(), 405, "method", "only POST is accepted")
            return Response(405, {"Allow": "POST"})
        try:
            event = Event.decode(request.body)
        except EventDecodeError as exc:
            metrics.events_rejected.labels(reason="bad_request").inc()
            log.debug("rejecting event: %s", exc)
            if self.history is not None:
                self.history.refused(None, new_id(), 400, "bad_request", str(exc))
            return Response.text(400, f"{exc}\n")
        if self.tracing:
            self._describe(event)
        cleaned = cleanup_metadata(event.metadata, event.object_group)
        if cleaned != event.metadata:
            event = event.model_copy(update={"metadata": cleaned})
        if not self.ready():
            metrics.events_rejected.labels(reason="not_ready").inc()
            if self.history is not None:
                self.history.refused(event, new_id(), 503, "not_ready", "the controller is not ready yet")
            return Response(503, {"Retry-After": "5"})
        key = event_key(event)
        if self.shared_window is not None:
            return self._durable(event, key)
        decision = self.limiter.take(key)
        if not decision.allowed:
            return self._duplicate(event, decision.headers())
        admitted = self.dispatcher.admit(event)
        if isinstance(admitted, int):  # the memory store: answered now, no task
            self._events_received.inc()
            return Response(202, decision.headers())
        return self._stored(event, key, admitted, decision.headers())

    async def _durable(self, event: Event, key: str) -> Response:
        """A durable store: the duplicate window may be shared by every replica (dispatch/duplicates.py), and
        the 202 comes once the notifications are stored (``Dispatcher.admit`` answers with an awaitable).

        A client that leaves does not cancel this (server/http1.py lets the answer finish, issue 23 item 8):
        the event is stored and a retry is a duplicate (429). It is cancelled only at the end of a shutdown's
        grace or past the server's ``max_detached``: then the window is released, so that the retry is
        admitted instead of being answered 429 for the whole interval while nothing was stored (at least
        once: an event stored just before the cancellation may be stored again by its retry)."""
        shared_window = self.shared_window
        if shared_window is None:
            decision = self.limiter.take(key)
        else:
            try:
                decision = await shared_window.take(key)
            except StoreError as exc:
                return self._store_unavailable(event, exc)
            except asyncio.CancelledError:
                await self._release(key)  # the store may have taken it
                raise
        headers = decision.headers()
        if not decision.allowed:
            return self._duplicate(event, headers)
        admitted = self.dispatcher.admit(event)
        if isinstance(admitted, int):
            self._events_received.inc()
            return Response(202, headers)
        return await self._stored(event, key, admitted, headers)

    async def _stored(
        self, event: Event, key: str, admitted: Awaitable[int], headers: Mapping[str, str]
    ) -> Response:
        """The 202 once the event's notifications are stored; 503 (and the window released) when the
        store cannot be reached."""
        try:
            await admitted
        except StoreError as exc:  # durable store unreachable: never 202-and-lose; the emitter retries
            await self._release(key)
            return self._store_unavailable(event, exc)
        except asyncio.CancelledError:
            await self._release(key)
            raise
        self._events_received.inc()
        return Response(202, headers)

    async def _release(self, key: str) -> None:
        """Undo a shared window's ``take`` whose admission did not complete; if even this fails, the window
        ends by itself and until then the retry is answered 429."""
        if self.shared_window is not None:
            with contextlib.suppress(StoreError):
                await self.shared_window.release(key)

    def _describe(self, event: Event) -> None:
        """The event on the ingest span: which object, why, how severe (masked; ``Span.set`` bounds them)."""
        span, obj, mask = current(), event.involved_object, self.mask
        span.set("notification.event.object", mask(f"{obj.kind}/{obj.namespace}/{obj.name}"[:1024]))
        span.set("notification.event.reason", mask(event.reason[:1024]))
        span.set("notification.event.severity", mask(event.severity[:64]))

    def _duplicate(self, event: Event, headers: Mapping[str, str]) -> Response:
        self.metrics.events_rejected.labels(reason="rate_limited").inc()
        if self.history is not None:
            self.history.record(
                Outcome.DUPLICATE,
                event,
                new_id(),
                stage="rate_limited",
                detail=f"the same event within --rate-limit-interval (retry after {headers.get('Retry-After', '?')}s)",
                status_code=429,
            )
        log.debug("Discarding event, rate limiting duplicate events: %s", event.involved_object.describe())
        return Response.text(429, "Too Many Requests\n", {**headers, "X-Content-Type-Options": "nosniff"})

    def _store_unavailable(self, event: Event, exc: StoreError) -> Response:
        self.metrics.events_rejected.labels(reason="store_unavailable").inc()
        if self.history is not None:
            self.history.refused(event, new_id(), 503, "store_unavailable", f"state store unavailable: {exc}")
        log.warning("refusing event for %s (503): %s", event.involved_object.describe(), exc)
        return Response.text(503, "state store unavailable\n", {"Retry-After": "5"})


def path_label(path: str) -> str:
    """The ``handler`` label of a request path with ``--export-http-path-metrics``: bounded, never the
    client's free choice."""
    return path if path in KNOWN_PATHS else OTHER_PATH

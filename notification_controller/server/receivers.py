"""The webhook receiver server on ``--receiverAddr`` (reference §5.1–5.2): the internet-facing half.

Order of checks (Flux's, plus the hardening marked *), one status code each, always an empty body:

1. body read with the 3 MiB cap, enforced while streaming (chunked bodies and ``Content-Encoding: gzip``
   bombs included: the cap counts decompressed bytes and stops reading) → **413**; read error or timeout → 400;
2. *object cache not synced yet → 503 (Flux's cache blocks; a 404 here would make GitLab count failures);
3. lookup of the raw request-target (path AND query string) in the ``status.webhookPath`` index → **404**;
   *and the path recomputed from the Secret as the store holds it now (``registry.path_is_current``): a path
   whose token was rotated away, or a spec an old API server let through without ``secretRef``, → **404**,
   on every replica, before any reconcile has rewritten the status (issue 11 item 9);
4. *any method but ``POST`` → **405** (Flux accepts any method: a GET would trigger a generic receiver);
5. ``spec.suspend`` or not Ready (``conditions.is_ready``) → **503**;
6. Secret + type verification (``receivers.registry``) → **400**;
7. *per-Receiver token bucket → **429** + ``Retry-After`` (only authentic requests spend tokens);
8. *GitHub ``ping`` / Bitbucket ``diagnostics:ping`` → 200, nothing patched;
9. *replayed delivery id (``X-GitHub-Delivery``, ``X-Gitlab-Event-UUID``, ``X-Request-UUID``, ``ce-id``,
   Pub/Sub ``messageId``) seen within ``replay_ttl`` → 200, nothing patched;
10. filters compiled (bad CEL → 500), ``req`` parsed (*not JSON → 400, Flux 500), every target processed →
    any failure **500** (the Kubernetes error goes to the log only), else **200**.

The webhook path is a credential: it is never logged above debug, nor used as a metric label; logs name the
Receiver and the first 8 hex characters of the digest (``core.webhook.path_digest_prefix``).

Tracing (``--otlp-endpoint``, docs/tracing.md): with it, the handler is ``traced_handle``: each request is
a server span continuing the sender's W3C ``traceparent``, with the receiver type, the Receiver
(``namespace/name``, once the path named one), the outcome (the metric's label) and the status — never the
path, a header or the body.

Malformed HTTP (a bad chunk size, ``Content-Length`` with ``Transfer-Encoding``, a bad header line) is
answered 400 by aiohttp's parser before any handler runs, and aiohttp logs it with ``logger.exception``:
anyone who reaches the port could fill the log at error level and page the operator. The runner is given
``ProtocolErrorLog`` as its logger: such client mistakes are logged at debug only (path redacted) and
counted as ``notification_receiver_requests_total{type="unknown",outcome="malformed"}``; anything else
aiohttp reports (a bug) stays an error with its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CollectorRegistry

from ..api.receiver import Receiver
from ..core.conditions import is_ready
from ..core.webhook import HOOK_PREFIX, path_digest_prefix
from ..errors import StoreError, VerificationError
from ..lib.clock import Clock, SystemClock
from ..lib.promdefs import DEFAULT_BUCKETS, counter, histogram, http_server_metrics
from ..objects.base import Cluster, ObjectStore
from ..outbound import OutboundHTTP
from ..receivers import registry
from ..receivers.base import GCRSettings, HookRequest, RawHeaders, VerifyContext
from ..receivers.guards import ReceiverRateLimit, ReplayCache, SharedReplays
from ..receivers.oidc import OIDCClient
from ..receivers.targets import FilterError, RequestBodyError, Trigger, compile_filters, request_value
from ..sandbox import SandboxPool
from ..settings import EventSettings, ReceiverSettings
from ..store.base import Store
from ..tracing import CURRENT, NOOP, SpanKind, Tracer, current

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
HANDLER_LABEL = "/hook/"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})


@dataclass(frozen=True)
class ReceiverServerSettings:
    no_cross_namespace_refs: bool = EventSettings.no_cross_namespace_refs  # flag defaults: settings.py
    body_limit: int = MAX_BODY
    body_read_timeout: float = 30.0  # whole body (Flux: ReadTimeout 30 s)
    replay_ttl: float = ReceiverSettings.replay_ttl  # 0 disables replay protection
    replay_max_entries: int = 100_000
    rate_limit: float = ReceiverSettings.rate_limit  # requests per second per Receiver; 0 disables
    rate_burst: int = ReceiverSettings.rate_burst
    kube_timeout: float = 10.0  # per Kubernetes call made for a target
    oidc_cache_ttl: float = 300.0
    oidc_timeout: float = 10.0
    gcr: GCRSettings = field(default_factory=GCRSettings)
    # Connection-level limits belong to the runner (see ``runner_kwargs``): header line/field sizes and
    # count (aiohttp answers 400 beyond them). aiohttp has no separate header-read timeout, but its keep-alive
    # timer is armed when a connection is accepted and after each response, and closes the connection if no
    # complete request head arrived: it is our header timeout (Flux: ReadHeaderTimeout 10 s) and the idle
    # timeout of keep-alive connections (aiohttp's default is ~1 h). See tests/adversarial/test_ingest_fuzz.py.
    max_line_size: int = 8190
    max_field_size: int = 8190
    max_headers: int = 128
    keepalive_timeout: float = 10.0
    lingering_time: float = 2.0  # after an answer to an unread body (413, timeout): discard, then close
    rejection_logs_per_minute: int = 30  # per Receiver; the rest are counted and summarised


_HOOK_PATH_RE = re.compile(r"/hook/([0-9A-Fa-f]{8})[0-9A-Fa-f]*[^\s\"']*")


def redact_hook_paths(text: str) -> str:
    """``/hook/<64 hex>[?query]`` → ``/hook/<first 8>…`` in any text (access lines, parser errors)."""
    return _HOOK_PATH_RE.sub(lambda m: f"/hook/{m.group(1)}…", text)


class HookPathFilter(logging.Filter):
    """Keeps webhook paths out of aiohttp's own logs (checklist F2, B8).

    aiohttp's access log and its parser errors (``Error handling request`` with a traceback quoting the
    request line) print the raw path, which is the receiver's credential. This filter rewrites such records
    with the path reduced to its 8-character prefix; client protocol errors (a malformed request, a body
    that cannot be decoded, found while aiohttp drains an unread body) that reach these loggers (a runner
    without ``ProtocolErrorLog``) lose their traceback, become DEBUG (dropped unless the logger is enabled
    for debug: never an error, which Flux's levels would print a WARNING as), and are limited to ``burst``
    per ``window`` seconds so a flood cannot spam the log.
    """

    def __init__(self, *, burst: int = 10, window: float = 60.0) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._window_start = 0.0
        self._count = 0
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError | web.RequestPayloadError):
            if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
                return False  # the record was made at ERROR; as a client mistake it is debug only
            now = time.monotonic()
            if now - self._window_start > self.window:
                self._window_start, self._count = now, 0
            self._count += 1
            if self._count > self.burst:
                self.suppressed += 1
                return False
            detail = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
            message = f"{message}: {type(exc).__name__}: {detail}"
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        elif record.exc_info:
            record.exc_text = redact_hook_paths(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        record.msg = redact_hook_paths(message)
        record.args = None
        return True


_AIOHTTP_LOGGERS = ("aiohttp.access", "aiohttp.server", "aiohttp.web")


def install_log_filters() -> None:
    """Attach ``HookPathFilter`` to aiohttp's loggers (idempotent)."""
    for name in _AIOHTTP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, HookPathFilter) for f in logger.filters):
            logger.addFilter(HookPathFilter())


class ProtocolErrorLog:
    """The logger of aiohttp's request handler on the receiver port (``runner_kwargs(settings, app)``).

    aiohttp calls ``exception()`` for what its parser refused (``HttpProcessingError``: bad chunk size,
    ``Content-Length`` with ``Transfer-Encoding``, bad header...) and for a body that fails while it drains
    it (``RequestPayloadError``): client mistakes, counted and logged at debug without traceback. Every
    other ``exception()`` is a server-side failure and keeps aiohttp's error with traceback. Everything
    else is passed to the wrapped logger (``aiohttp.server``, whose ``HookPathFilter`` redacts paths).
    """

    def __init__(self, metrics: ReceiverMetrics, logger: logging.Logger | None = None) -> None:
        self._logger = logger or logging.getLogger("aiohttp.server")
        self._malformed = metrics.requests.labels("unknown", "malformed")

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._logger.debug(msg, *args, **kwargs)

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if not isinstance(exc, HttpProcessingError | web.RequestPayloadError):
            self._logger.exception(msg, *args, exc_info=exc_info, **kwargs)
            return
        self._malformed.inc()
        if self._logger.isEnabledFor(logging.DEBUG):
            detail = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
            self._logger.debug(
                "malformed request answered 400: %s: %s", type(exc).__name__, redact_hook_paths(str(detail))
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


def runner_kwargs(settings: ReceiverServerSettings, app: web.Application | None = None) -> dict[str, Any]:
    """Keyword arguments for ``web.AppRunner`` serving this app (no access log: it would print paths).
    With the receiver ``app``, its malformed requests are counted and logged at debug (``ProtocolErrorLog``)."""
    extra: dict[str, Any] = {}
    if app is not None and SERVER_KEY in app:
        extra["logger"] = ProtocolErrorLog(app[SERVER_KEY].metrics)
    return {
        **extra,
        "access_log": None,
        "handler_cancellation": True,
        "max_line_size": settings.max_line_size,
        "max_field_size": settings.max_field_size,
        "max_headers": settings.max_headers,
        "keepalive_timeout": settings.keepalive_timeout,
        "lingering_time": settings.lingering_time,
    }


class ReceiverMetrics:
    """Flux's ``gotk_receiver_http_*`` (go-http-metrics names) and our ``notification_receiver_*``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.http_duration, _, self.http_inflight = http_server_metrics(
            registry, "gotk_receiver", "receiver", response_size=False
        )
        self.requests = counter(
            registry,
            "notification_receiver_requests_total",
            "Webhook requests by receiver type and outcome.",
            ["type", "outcome"],
        )
        self.patch_duration = histogram(
            registry,
            "notification_receiver_patch_duration_seconds",
            "Time to resolve and annotate the targets of one webhook request.",
            ["type"],
            buckets=DEFAULT_BUCKETS,
        )


@dataclass
class _Answer:
    status: int
    outcome: str
    type: str = "unknown"
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False


class _LogBudget:
    """At most ``per_minute`` rejection logs per Receiver; the suppressed ones are counted in the next log."""

    def __init__(self, per_minute: int, clock: Clock) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._windows: dict[str, tuple[float, int, int]] = {}  # key → (start, logged, suppressed)

    def take(self, key: str) -> tuple[bool, int]:
        """(may log, number suppressed since the last log)."""
        now = self._clock.monotonic()
        start, logged, suppressed = self._windows.get(key, (now, 0, 0))
        if now - start >= 60.0:
            start, logged = now, 0
        if logged < self.per_minute:
            self._windows[key] = (start, logged + 1, 0)
            return True, suppressed
        if len(self._windows) > 10_000:  # bounded: forget everything rather than grow
            self._windows.clear()
        self._windows[key] = (start, logged, suppressed + 1)
        return False, 0


class _TooLarge(Exception):
    pass


class _ReadFailed(Exception):
    pass


class ReceiverServer:
    """The state of one receiver app: caches, limiter, replay store, OIDC client. Owned by the app."""

    def __init__(
        self,
        store: ObjectStore,
        cluster: Cluster,
        settings: ReceiverServerSettings,
        metrics: ReceiverMetrics,
        clock: Clock,
        oidc: OIDCClient | None = None,
        replay_store: Store | None = None,
        http: OutboundHTTP | None = None,
        sandbox: SandboxPool | None = None,
        tracer: Tracer = NOOP,
    ) -> None:
        self.tracer = tracer
        self.tracing = tracer.enabled
        self.sandbox = sandbox  # resource filters and generic-oidc CEL beyond the inline-safe subset
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self._inflight = metrics.http_inflight.labels(service="", handler=HANDLER_LABEL)
        self._children: dict[tuple[Any, ...], Any] = {}
        self.clock = clock
        self.limiter = ReceiverRateLimit(settings.rate_limit, settings.rate_burst, clock)
        self.replays = ReplayCache(settings.replay_ttl, clock, max_entries=settings.replay_max_entries)
        # with a durable state store the window is shared by every replica (docs/delivery.md)
        self.shared_replays = SharedReplays(replay_store, settings.replay_ttl) if replay_store else None
        self._log_budget = _LogBudget(settings.rejection_logs_per_minute, clock)
        self.oidc = oidc or OIDCClient(
            clock, ttl=settings.oidc_cache_ttl, timeout=settings.oidc_timeout, http=http
        )
        self.trigger = Trigger(
            cluster,
            clock,
            no_cross_namespace_refs=settings.no_cross_namespace_refs,
            kube_timeout=settings.kube_timeout,
            sandbox=sandbox,
        )

    async def close(self) -> None:
        await self.oidc.close()

    # ---- HTTP -------------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not request.path.startswith(HOOK_PREFIX):
            return web.Response(status=404)
        method = request.method if request.method in _METHODS else "OTHER"
        inflight = self._inflight
        inflight.inc()
        start = time.perf_counter()
        status = 500
        try:
            try:
                answer = await self._process(request)
            except Exception:  # a bug: answer 500 with an empty body, never leak a traceback to the sender
                log.exception("hook %s: unexpected error", path_digest_prefix(request.raw_path))
                answer = _Answer(500, "error")
            status = answer.status
            self._child(self.metrics.requests, answer.type, answer.outcome).inc()
            if self.tracing:
                span = current()
                span.set("notification.receiver.type", answer.type)
                span.set("notification.receiver.outcome", answer.outcome)
            response = web.Response(status=answer.status, headers=answer.headers)
            if answer.close:
                response.force_close()
            return response
        finally:
            inflight.dec()
            self._child(self.metrics.http_duration, "", HANDLER_LABEL, method, str(status)).observe(
                time.perf_counter() - start
            )

    async def traced_handle(self, request: web.Request) -> web.StreamResponse:
        """``handle`` in a server span (see the module docstring)."""
        method = request.method if request.method in _METHODS else "OTHER"
        span = self.tracer.start(
            f"{method} {HOOK_PREFIX}",
            parent=request.headers.get("traceparent"),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method},
        )
        token = CURRENT.set(span)
        status = 500
        try:
            response = await self.handle(request)
            status = response.status
            return response
        finally:
            CURRENT.reset(token)
            span.set("http.response.status_code", status)
            if status >= 500:
                span.fail(str(status))
            span.end()

    def _child(self, metric: Any, *labels: str) -> Any:
        """Cached metric children (``labels()`` was a sixth of the handler's time); label sets are bounded."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self.settings.body_limit
        if request.content_length is not None and request.content_length > limit:
            raise _TooLarge
        buf = bytearray()
        try:
            if request.content_length is not None and "Content-Encoding" not in request.headers:
                # Fast path: a small body has usually arrived with the head; take it without a timer.
                buf += request.content.read_nowait(-1)
                if len(buf) == request.content_length and request.content.at_eof():
                    return bytes(buf)
            async with asyncio.timeout(self.settings.body_read_timeout):
                while True:
                    chunk = await request.content.readany()
                    if not chunk:
                        break
                    buf += chunk
                    if len(buf) > limit:
                        raise _TooLarge
        except TimeoutError:
            raise _ReadFailed("timed out reading the body") from None
        except (web.RequestPayloadError, ConnectionError, OSError, ValueError, RuntimeError) as exc:
            raise _ReadFailed(type(exc).__name__) from None
        return bytes(buf)

    async def _process(self, request: web.Request) -> _Answer:
        path = request.raw_path
        hook = path_digest_prefix(path)
        try:
            body = await self._read_body(request)
        except _TooLarge:
            log.debug("hook %s: body larger than %d bytes", hook, self.settings.body_limit)
            return _Answer(413, "too_large", close=True)
        except _ReadFailed as exc:
            log.debug("hook %s: cannot read the body: %s", hook, exc)
            return _Answer(400, "bad_request", close=True)

        if not self.store.synced:
            return _Answer(503, "not_ready", headers={"Retry-After": "5"})
        receiver = self.store.receiver_by_path(path)
        if receiver is None:
            log.debug("hook %s: no receiver", hook)
            return _Answer(404, "not_found")
        rtype = str(receiver.spec.type)
        who = f"{receiver.metadata.namespace}/{receiver.metadata.name}"
        secret = registry.read_secret(receiver, self.store)  # one read: it vouches for the path and verifies
        if not registry.path_is_current(path, receiver, secret):
            may_log, suppressed = self._log_budget.take(who)
            if may_log:
                more = f" ({suppressed} similar rejections not logged)" if suppressed else ""
                log.info(
                    "receiver %s (hook %s): path not derived from the current secret token (rotated?), "
                    "answered as unknown%s",
                    who,
                    hook,
                    more,
                )
            return _Answer(404, "not_found", rtype)
        if self.tracing:  # only once the path is the current one: a rotated-away path names no Receiver
            current().set("notification.receiver", who)
        if request.method != "POST":
            log.debug("receiver %s (hook %s): method %s not allowed", who, hook, request.method[:16])
            return _Answer(405, "method_not_allowed", rtype, {"Allow": "POST"})
        if receiver.spec.suspend:
            log.info("receiver %s (hook %s): unable to process request: receiver is suspended", who, hook)
            return _Answer(503, "suspended", rtype)
        if not is_ready(receiver.status.conditions):
            log.info("receiver %s (hook %s): unable to process request: receiver is not ready", who, hook)
            return _Answer(503, "not_ready", rtype)

        hook_request = HookRequest(request.method, path, RawHeaders(request.raw_headers), body)
        ctx = VerifyContext(
            receiver=receiver,
            secret=secret,
            clock=self.clock,
            oidc=self.oidc,
            gcr=self.settings.gcr,
            sandbox=self.sandbox,
        )
        try:
            verified = await registry.verify(hook_request, ctx)
        except VerificationError as exc:
            may_log, suppressed = self._log_budget.take(who)
            if may_log:
                more = f" ({suppressed} similar rejections not logged)" if suppressed else ""
                log.info("receiver %s (hook %s): unable to validate payload: %s%s", who, hook, exc, more)
            return _Answer(exc.status, "rejected_signature", rtype)

        wait = self.limiter.take(who)
        if wait is not None:
            log.info("receiver %s (hook %s): rate limited", who, hook)
            return _Answer(
                429, "rate_limited", rtype, {"Retry-After": ReceiverRateLimit.retry_after_header(wait)}
            )
        event = f" {verified.event!r}" if verified.event else ""
        if verified.ping:
            log.info("receiver %s (hook %s): %s ping%s answered, nothing triggered", who, hook, rtype, event)
            return _Answer(200, "ping", rtype)
        replay_key = f"{who}/{rtype}/{verified.delivery_id}" if verified.delivery_id else None
        if replay_key is not None and not await self._claim(replay_key):
            log.info("receiver %s (hook %s): delivery %r already handled", who, hook, verified.delivery_id)
            return _Answer(200, "replayed", rtype)
        done = False
        try:
            answer = await self._trigger(
                receiver, verified.body, hook_request.headers, verified.claims, who, hook
            )
            done = answer.status == 200
            if done:
                log.info("receiver %s (hook %s): handled %s event%s", who, hook, rtype, event)
            return answer
        finally:
            if replay_key is not None and not done:
                await self._release(replay_key)  # let the sender's retry through

    async def _claim(self, key: str) -> bool:
        if self.shared_replays is None:
            return self.replays.claim(key)
        try:
            return await self.shared_replays.claim(key)
        except StoreError as exc:  # fail open: a second reconcile request is harmless, a lost one is not
            log.warning("replay window unavailable, handling the delivery anyway: %s", exc)
            return self.replays.claim(key)

    async def _release(self, key: str) -> None:
        self.replays.release(key)
        if self.shared_replays is not None:
            with contextlib.suppress(StoreError):  # the window ends by itself
                await self.shared_replays.release(key)

    async def _trigger(
        self,
        receiver: Receiver,
        body: bytes,
        headers: RawHeaders,
        claims: Any,
        who: str,
        hook: str,
    ) -> _Answer:
        rtype = str(receiver.spec.type)
        try:
            filters = compile_filters(receiver, registry.record(receiver.spec.type).filter_variables)
        except FilterError as exc:
            log.error("receiver %s (hook %s): unable to create CEL evaluator: %s", who, hook, exc)
            return _Answer(500, "error", rtype)
        req: dict[str, Any] | None = None
        if filters.configured:
            try:
                req = request_value(headers, body)
            except RequestBodyError as exc:
                log.info("receiver %s (hook %s): %s", who, hook, exc)
                return _Answer(400, "bad_request", rtype)
        start = time.perf_counter()
        try:
            result = await self.trigger.run(receiver, filters, req=req, claims=claims)
        finally:
            self.metrics.patch_duration.labels(type=rtype).observe(time.perf_counter() - start)
        if result.errors:
            for error in result.errors:
                log.error("receiver %s (hook %s): unable to request reconciliation: %s", who, hook, error)
            return _Answer(500, "patch_failed", rtype)
        return _Answer(200, "accepted", rtype)


SERVER_KEY = web.AppKey("receiver_server", ReceiverServer)


def create_receiver_app(
    store: ObjectStore,
    cluster: Cluster,
    *,
    settings: ReceiverServerSettings | None = None,
    metrics: ReceiverMetrics | CollectorRegistry | None = None,
    registry: CollectorRegistry | None = None,
    clock: Clock | None = None,
    oidc: OIDCClient | None = None,
    replay_store: Store | None = None,
    http: OutboundHTTP | None = None,
    sandbox: SandboxPool | None = None,
    tracer: Tracer = NOOP,
) -> web.Application:
    """Build the receiver app. ``metrics`` (or ``registry``) must not be the global default registry."""
    settings = settings or ReceiverServerSettings()
    install_log_filters()
    if isinstance(metrics, ReceiverMetrics):
        receiver_metrics = metrics
    else:
        target = metrics if metrics is not None else registry
        receiver_metrics = ReceiverMetrics(target if target is not None else CollectorRegistry())
    server = ReceiverServer(
        store,
        cluster,
        settings,
        receiver_metrics,
        clock or SystemClock(),
        oidc,
        replay_store=replay_store,
        http=http,
        sandbox=sandbox,
        tracer=tracer,
    )

    async def close(_: web.Application) -> None:
        await server.close()

    # client_max_size only matters if something calls request.read(); the handler streams with its own cap.
    app = web.Application(client_max_size=settings.body_limit)
    app[SERVER_KEY] = server
    app.on_cleanup.append(close)
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]] = (
        server.traced_handle if tracer.enabled else server.handle
    )
    # every path reaches the handler (its 404 has an empty body): "." stops at a percent-decoded line break, and
    # aiohttp's own 404 would answer "/hook/%0A" with a text body
    app.router.add_route("*", r"/{tail:[\s\S]*}", handler)
    return app

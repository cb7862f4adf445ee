"""The webhook receiver server on ``--receiverAddr`` (reference §5.1–5.2): the internet-facing half.

Order of checks (Flux's, plus the hardening marked *), one status code each, always an empty body:

1. body read with the 3 MiB cap (the HTTP layer: at once when ``Content-Length`` says more, while streaming
   for a chunked body) → **413**; a ``Content-Encoding: gzip``/``deflate`` body is decompressed here with the
   same cap on the decompressed bytes, stopping there (a gzip bomb is never inflated past it) → **413**; a
   body that does not decompress, or does not arrive within ``body_read_timeout`` → 400;
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

The HTTP/1.1 layer is the event listener's (``server/http1.py``, llhttp): the same parser limits (a header
line over 8190 bytes or more than 128 headers → 431, an over-long request line → 414), the same slow-client
timers (a request head within ``keepalive_timeout`` of the accept or the previous answer, the body within
``body_read_timeout``, ``lingering_time`` after an answer that closes), bounded pipelining and a client that
does not read its answers closed after ``write_timeout``. It replaced aiohttp here in issue 29 (item 5): aiohttp's
router, request and response objects and the task per request were most of the CPU of a valid webhook.
Measured with callgrind on the real controller in local mode (a signed GitHub push of 3 KB, distinct delivery
ids, one keep-alive connection, ``--log-level=error``) against ``bench/baseline.py`` (a bare aiohttp server that
reads and parses the body: 357k instructions per request): 952k (2.67×) on aiohttp, 461k (1.29×) here; a
forged push 611k → 279k. Then (issue 29, same measurement, the bare server 364k): accepted references
remembered by ``core.apiref`` (local mode's cluster validated each webhook's get and annotate again, ~74k),
the Go time string's second remembered (``lib/clock.py``, ~15k), ``spec.events`` folded once per context and
the replay cache's order in deques (``receivers/guards.py``; a full cache walked its dict's deleted slots, 56 µs
a claim): 363k (1.00×), a forged push 276k. The HMAC over the body is ~89k of it (libcrypto).

A request the parser refuses before its head is complete (a bad request line or header) is answered 400 by
the layer itself, counted as ``notification_receiver_requests_total{type="unknown",outcome="malformed"}`` and
logged at debug only, without the path: anyone who reaches the port must not be able to fill the log at error
level (issue 23 item 17). The layer never logs a path either.

A webhook is one request in, one answer out, with what can be known before it computed once per Receiver
version (``Hook``): its lookup key, the current-path check, its verifier, verify context, compiled filters,
validated targets and metric children are made on the first request after the Receiver or its Secret
changed, not per request. Everything up to the trigger runs without a task for the types whose verifier
does no I/O (all but generic-oidc and gcr): a refusal, a ping or a replay costs no task; the targets are
patched on one.

The webhook path is a credential: it is never logged above debug, nor used as a metric label; logs name the
Receiver and the first 8 hex characters of the digest (``core.webhook.path_digest_prefix``).

Tracing (``--otlp-endpoint``, docs/tracing.md): each request is a server span continuing the sender's W3C
``traceparent``, with the receiver type, the Receiver (``namespace/name``, once the path named one), the
outcome (the metric's label) and the status — never the path, a header or the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import zlib
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from ..api.common import Secret
from ..api.receiver import Receiver
from ..core.conditions import is_ready
from ..core.webhook import HOOK_PREFIX, path_digest_prefix
from ..errors import StoreError, VerificationError
from ..lib.clock import Clock, SystemClock
from ..lib.promdefs import DEFAULT_BUCKETS, counter, histogram, http_server_metrics
from ..metrics import loop_counter, loop_histogram
from ..objects.base import Change, Cluster, ObjectStore
from ..outbound import OutboundHTTP
from ..receivers import registry
from ..receivers.base import GCRSettings, HookRequest, RawHeaders, Verified, Verifier, VerifyContext
from ..receivers.guards import ReceiverRateLimit, ReplayCache, SharedReplays
from ..receivers.oidc import OIDCClient
from ..receivers.targets import (
    FilterError,
    Filters,
    RequestBodyError,
    Resumed,
    Target,
    Trigger,
    compile_filters,
    on_task,
    request_value,
)
from ..sandbox import SandboxPool
from ..settings import EventSettings, ReceiverSettings
from ..store.base import Store
from ..tracing import NOOP, Tracer, current
from .http1 import HTTPServer, Request, Response, ServerLimits
from .spans import CLIENT_CLOSED, serve_traced

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
HANDLER_LABEL = "/hook/"
_HOOK_PREFIX = HOOK_PREFIX.encode("ascii")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})
_ENCODING = b"content-encoding"


@dataclass(frozen=True)
class ReceiverServerSettings:
    no_cross_namespace_refs: bool = EventSettings.no_cross_namespace_refs  # flag defaults: settings.py
    body_limit: int = MAX_BODY  # raw and decompressed
    body_read_timeout: float = 30.0  # whole body (Flux: ReadTimeout 30 s)
    replay_ttl: float = ReceiverSettings.replay_ttl  # 0 disables replay protection
    replay_max_entries: int = 100_000
    rate_limit: float = ReceiverSettings.rate_limit  # requests per second per Receiver; 0 disables
    rate_burst: int = ReceiverSettings.rate_burst
    kube_timeout: float = 10.0  # per Kubernetes call made for a target
    oidc_cache_ttl: float = 300.0
    oidc_timeout: float = 10.0
    gcr: GCRSettings = field(default_factory=GCRSettings)
    # The connection's limits (server/http1.py): a header line over ``max_line_size`` or more than
    # ``max_headers`` → 431; a complete request head within ``keepalive_timeout`` of the accept or of the
    # previous answer (Flux: ReadHeaderTimeout 10 s; also the idle timeout of keep-alive connections), else the
    # connection is closed. See tests/adversarial/test_ingest_fuzz.py and test_receiver_listener.py.
    max_line_size: int = 8190
    max_headers: int = 128
    keepalive_timeout: float = 10.0
    lingering_time: float = 2.0  # after an answer to an unread body (413, timeout): discard, then close
    rejection_logs_per_minute: int = 30  # per Receiver; the rest are counted and summarised

    def limits(self) -> ServerLimits:
        return ServerLimits(
            max_body=self.body_limit,
            header_timeout=self.keepalive_timeout,
            body_timeout=self.body_read_timeout,
            lingering_time=self.lingering_time,
            max_line=self.max_line_size,
            max_headers=self.max_headers,
        )


_HOOK_PATH_RE = re.compile(r"/hook/([0-9A-Fa-f]{8})[0-9A-Fa-f]*[^\s\"']*")


def redact_hook_paths(text: str) -> str:
    """``/hook/<64 hex>[?query]`` → ``/hook/<first 8>…`` in any text."""
    return _HOOK_PATH_RE.sub(lambda m: f"/hook/{m.group(1)}…", text)


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


class BodyTooLarge(Exception):
    """The body is over the cap once decompressed (413)."""


class UndecodableBody(Exception):
    """The body does not decompress (400)."""


def decode_body(body: bytes, encoding: bytes, limit: int) -> bytes:
    """The body of a request with ``Content-Encoding: encoding``, at most ``limit`` bytes once decompressed.

    As aiohttp's server did before (issue 29 kept its behaviour): ``gzip`` (concatenated members too) and
    ``deflate`` (zlib-wrapped, or raw as some clients send it) are decompressed, and the signature is checked
    over the result; ``br`` and ``zstd`` cannot be decoded here → ``UndecodableBody`` (400); any other value is
    left alone. Decompression stops ``limit`` bytes in (``BodyTooLarge``, 413): a 50 KB gzip of 50 MiB of zeros
    costs 3 MiB of output at most. A truncated stream is ``UndecodableBody``.
    """
    coding = encoding.strip().lower()
    if coding == b"gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif coding == b"deflate":
        wbits = zlib.MAX_WBITS if body[:1] and body[0] & 0x0F == 8 else -zlib.MAX_WBITS
    elif coding in (b"br", b"zstd"):
        raise UndecodableBody(f"content-encoding {coding.decode('latin-1')} is not supported")
    else:
        return body
    out: list[bytes] = []
    size = 0
    data = body
    try:
        while True:
            inflater = zlib.decompressobj(wbits)
            chunk = inflater.decompress(data, limit - size + 1)
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            out.append(chunk)
            if not inflater.eof:
                if inflater.unconsumed_tail:  # more output than the room left
                    raise BodyTooLarge
                raise UndecodableBody("truncated compressed body")
            data = inflater.unused_data
            if not data or wbits != 16 + zlib.MAX_WBITS:
                break
    except zlib.error as exc:
        raise UndecodableBody(str(exc)) from None
    return b"".join(out)


@dataclass(slots=True, eq=False)
class Hook:
    """One Receiver as its webhook requests need it, prepared once per version of the Receiver and its Secret
    (``ReceiverEndpoint.hook``): what a request does is the checks that depend on the request."""

    receiver: Receiver
    secret: Secret | None
    secret_key: tuple[str, str] | None  # where ``secret`` is read from (None: the type reads none)
    current: bool  # the path is the one the current Secret gives (``registry.path_is_current``)
    rtype: str
    who: str  # namespace/name, for logs and keys
    digest: str  # the path's 8-character prefix, for logs
    ready: bool
    suspended: bool
    awaits: bool  # the verifier does I/O (run on a task)
    verifier: Verifier
    context: VerifyContext
    token_error: VerificationError | None  # the Secret or its token is missing (Flux's 400 message)
    filters: Filters | FilterError
    plan: tuple[Target, ...]
    outcomes: dict[str, Any]  # outcome → notification_receiver_requests_total child
    patch_duration: Any


class ReceiverEndpoint:
    """The receiver listener's handler (``server/http1.py``'s ``Handler``): caches, limiter, replay store,
    OIDC client and the prepared hooks. Owned by the app."""

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
        *,
        cluster_waits: bool = True,
    ) -> None:
        self.tracer = tracer
        self.tracing = tracer.enabled
        self.sandbox = sandbox  # resource filters and generic-oidc CEL beyond the inline-safe subset
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self._inflight = metrics.http_inflight.labels(service="", handler=HANDLER_LABEL)
        self._observed: dict[tuple[str, int], Any] = {}
        self._unknown: dict[str, Any] = {}
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
            waits=cluster_waits,
        )
        # webhook path → its prepared Hook; an entry goes when its Receiver changes or goes (bounded by the
        # Receivers with a path), and is checked against the store's objects on every request
        self._hooks: dict[str, Hook] = {}
        self._unsubscribe = store.subscribe(self._on_change)

    def server(self) -> HTTPServer:
        """The receiver listener (not yet listening: ``await server.start(host, port)``)."""
        return HTTPServer(self, self.settings.limits(), on_malformed=self.malformed)

    async def close(self) -> None:
        self._unsubscribe()
        self._hooks.clear()
        await self.oidc.close()

    # ---- prepared hooks -----------------------------------------------------------------------------------
    def _on_change(self, change: Change) -> None:
        if change.kind != "Receiver":
            return  # a Secret's change is seen by the identity check in ``hook``
        for obj in (change.old, change.obj):
            if isinstance(obj, Receiver) and obj.status.webhook_path:
                self._hooks.pop(obj.status.webhook_path, None)

    def hook(self, path: str) -> Hook | None:
        """The prepared hook of ``path``, None when no Receiver has it. Rebuilt when the Receiver or its
        Secret is not the object it was prepared from (the store replaces objects, never changes them)."""
        store = self.store
        receiver = store.receiver_by_path(path)
        if receiver is None:
            return None
        hook = self._hooks.get(path)
        if hook is not None and hook.receiver is receiver:
            key = hook.secret_key
            if (store.secret(*key) if key is not None else None) is hook.secret:
                return hook
        hook = self._hooks[path] = self._prepare(path, receiver)
        return hook

    def _prepare(self, path: str, receiver: Receiver) -> Hook:
        meta, spec = receiver.metadata, receiver.spec
        record = registry.record(spec.type)
        secret = registry.read_secret(receiver, self.store)
        ref = spec.secret_ref
        secret_key = (meta.namespace, ref.name) if ref is not None and record.needs_secret else None
        token_error: VerificationError | None = None
        try:
            registry.secret_token(receiver, secret)
        except registry.TokenUnavailable as exc:
            token_error = exc
        rtype = str(spec.type)
        filters: Filters | FilterError
        try:
            filters = compile_filters(receiver, record.filter_variables)
        except FilterError as exc:
            filters = exc
        requests = self.metrics.requests
        return Hook(
            receiver=receiver,
            secret=secret,
            secret_key=secret_key,
            current=registry.path_is_current(path, receiver, secret),
            rtype=rtype,
            who=f"{meta.namespace}/{meta.name}",
            digest=path_digest_prefix(path),
            ready=is_ready(receiver.status.conditions),
            suspended=bool(spec.suspend),
            awaits=record.awaits,
            verifier=record.verify.load(),
            context=VerifyContext(
                receiver=receiver,
                secret=secret,
                clock=self.clock,
                oidc=self.oidc,
                gcr=self.settings.gcr,
                sandbox=self.sandbox,
            ),
            token_error=token_error,
            filters=filters,
            plan=self.trigger.plan(receiver),
            outcomes={
                outcome: loop_counter(requests.labels(rtype, outcome)) for outcome in ("accepted", "replayed")
            },
            patch_duration=loop_histogram(self.metrics.patch_duration.labels(type=rtype)),
        )

    # ---- the HTTP layer's Handler -------------------------------------------------------------------------
    def __call__(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        if self.tracing:
            return self._traced(request)
        return self._handle(request)

    def _handle(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        if not request.target.startswith(_HOOK_PREFIX):
            return Response(404)  # not a hook: not counted (as under aiohttp)
        start = time.perf_counter()
        try:
            result = self._process(request)
        except Exception:  # a bug: answer 500 with an empty body, never leak a traceback to the sender
            log.exception("hook %s: unexpected error", _digest(request))
            result = self._answer(None, 500, "error")
        if not isinstance(result, Response):
            # the trigger: run here until it first waits (in local mode it never does), the rest on a task
            try:
                first = result.send(None)
            except StopIteration as done:
                result = done.value
            except Exception:
                log.exception("hook %s: unexpected error", _digest(request))
                result = self._answer(None, 500, "error")
            else:
                return self._finish(request, Resumed(result, first), start)
        # answered without yielding to the loop: no scrape can see it in flight, so the gauge is not moved
        self._observe(request.method, result.status, start)
        return result

    async def _finish(self, request: Request, pending: Awaitable[Response], start: float) -> Response:
        inflight = self._inflight
        inflight.inc()
        status = 500
        try:
            try:
                response = await pending
            except Exception:
                log.exception("hook %s: unexpected error", _digest(request))
                response = self._answer(None, 500, "error")
            status = response.status
            return response
        except asyncio.CancelledError:  # the answer was given up (shutdown, or too many left by their client)
            status = CLIENT_CLOSED
            raise
        finally:
            inflight.dec()
            self._observe(request.method, status, start)

    def _traced(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        """``_handle`` in a server span (``spans.py``)."""
        method = request.method if request.method in _METHODS else "OTHER"
        attributes = {"http.request.method": method}
        return serve_traced(self.tracer, f"{method} {HOOK_PREFIX}", request, attributes, self._handle)

    def refused(self, request: Request, status: int) -> Response:
        """Answers the HTTP layer gives itself once a head was parsed: 413 (body over the cap), 400 (a bad
        chunk, a body too slow, Host missing or repeated, ambiguous framing), 417, 501; 499 when the client
        left before its body was complete (nothing is sent)."""
        if status == 413:
            log.debug("hook %s: body larger than %d bytes", _digest(request), self.settings.body_limit)
            self._count_unknown("too_large")
        elif status != CLIENT_CLOSED:
            log.debug("hook %s: request refused by the HTTP layer (%d)", _digest(request), status)
            self._count_unknown("malformed")
        if request.target.startswith(_HOOK_PREFIX):
            self._observe(request.method, status, time.perf_counter())
        return Response(status, close=True)

    def malformed(self, status: int) -> None:
        """A request refused before its head was complete (``HTTPServer.on_malformed``)."""
        self._count_unknown("malformed")
        log.debug("malformed request answered %d", status)

    # ---- bookkeeping --------------------------------------------------------------------------------------
    def _count_unknown(self, outcome: str) -> None:
        child = self._unknown.get(outcome)
        if child is None:
            child = self._unknown[outcome] = loop_counter(self.metrics.requests.labels("unknown", outcome))
        child.inc()

    def _observe(self, method: str, status: int, start: float) -> None:
        key = (method if method in _METHODS else "OTHER", status)  # no free-form label values
        child = self._observed.get(key)
        if child is None:
            child = self._observed[key] = loop_histogram(
                self.metrics.http_duration.labels("", HANDLER_LABEL, key[0], str(status))
            )
        child.observe(time.perf_counter() - start)

    def _answer(
        self,
        hook: Hook | None,
        status: int,
        outcome: str,
        headers: dict[str, str] | None = None,
        *,
        close: bool = False,
    ) -> Response:
        """The empty-bodied answer, counted by the Receiver's type and the outcome."""
        if hook is None:
            self._count_unknown(outcome)
            rtype = "unknown"
        else:
            child = hook.outcomes.get(outcome)
            if child is None:
                child = hook.outcomes[outcome] = loop_counter(
                    self.metrics.requests.labels(hook.rtype, outcome)
                )
            child.inc()
            rtype = hook.rtype
        if self.tracing:
            span = current()
            span.set("notification.receiver.type", rtype)
            span.set("notification.receiver.outcome", outcome)
        return Response(status, headers, close=close)

    def _rejection(self, hook: Hook, message: str, *args: object) -> None:
        """An info log of a rejection, within the Receiver's budget."""
        may_log, suppressed = self._log_budget.take(hook.who)
        if may_log:
            more = f" ({suppressed} similar rejections not logged)" if suppressed else ""
            log.info(message + "%s", *args, more)

    # ---- the webhook --------------------------------------------------------------------------------------
    def _process(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        headers = RawHeaders.from_wire(request.headers)
        body = request.body
        encoding = headers.get("content-encoding")
        if encoding is not None:
            try:
                body = decode_body(body, encoding, self.settings.body_limit)
            except BodyTooLarge:
                log.debug("hook %s: body larger than %d bytes", _digest(request), self.settings.body_limit)
                return self._answer(None, 413, "too_large", close=True)
            except UndecodableBody as exc:
                log.debug("hook %s: cannot read the body: %s", _digest(request), exc)
                return self._answer(None, 400, "bad_request", close=True)

        if not self.store.synced:
            return self._answer(None, 503, "not_ready", {"Retry-After": "5"})
        path = request.target.decode("utf-8", "surrogateescape")
        hook = self.hook(path)
        if hook is None:
            log.debug("hook %s: no receiver", _digest(request))
            return self._answer(None, 404, "not_found")
        if not hook.current:
            self._rejection(
                hook,
                "receiver %s (hook %s): path not derived from the current secret token (rotated?), "
                "answered as unknown",
                hook.who,
                hook.digest,
            )
            return self._answer(hook, 404, "not_found")
        if self.tracing:  # only once the path is the current one: a rotated-away path names no Receiver
            current().set("notification.receiver", hook.who)
        if request.method != "POST":
            log.debug(
                "receiver %s (hook %s): method %s not allowed", hook.who, hook.digest, request.method[:16]
            )
            return self._answer(hook, 405, "method_not_allowed", {"Allow": "POST"})
        if hook.suspended:
            log.info(
                "receiver %s (hook %s): unable to process request: receiver is suspended",
                hook.who,
                hook.digest,
            )
            return self._answer(hook, 503, "suspended")
        if not hook.ready:
            log.info(
                "receiver %s (hook %s): unable to process request: receiver is not ready",
                hook.who,
                hook.digest,
            )
            return self._answer(hook, 503, "not_ready")

        hook_request = HookRequest(request.method, path, headers, body)
        if hook.token_error is not None:
            return self._unverified(hook, hook.token_error)
        if hook.awaits:
            return self._verify_then_trigger(hook, hook_request)
        try:
            verified = registry.run_now(hook.verifier(hook_request, hook.context))
        except VerificationError as exc:
            return self._unverified(hook, exc)
        return self._verified(hook, verified, headers)

    async def _verify_then_trigger(self, hook: Hook, request: HookRequest) -> Response:
        await on_task()  # the verifier fetches key sets
        try:
            verified = await hook.verifier(request, hook.context)
        except VerificationError as exc:
            return self._unverified(hook, exc)
        result = self._verified(hook, verified, request.headers)
        return result if isinstance(result, Response) else await result

    def _unverified(self, hook: Hook, exc: VerificationError) -> Response:
        self._rejection(
            hook, "receiver %s (hook %s): unable to validate payload: %s", hook.who, hook.digest, exc
        )
        return self._answer(hook, exc.status, "rejected_signature")

    def _verified(
        self, hook: Hook, verified: Verified, headers: RawHeaders
    ) -> Response | Coroutine[Any, Any, Response]:
        """Steps 7–10 for an authentic request."""
        who = hook.who
        wait = self.limiter.take(who)
        if wait is not None:
            log.info("receiver %s (hook %s): rate limited", who, hook.digest)
            return self._answer(
                hook, 429, "rate_limited", {"Retry-After": ReceiverRateLimit.retry_after_header(wait)}
            )
        if verified.ping:
            log.info(
                "receiver %s (hook %s): %s ping%s answered, nothing triggered",
                who,
                hook.digest,
                hook.rtype,
                _event(verified),
            )
            return self._answer(hook, 200, "ping")
        delivery = verified.delivery_id
        if delivery is None:
            return self._trigger(hook, verified, headers, None)
        replay_key = f"{who}/{hook.rtype}/{delivery}"
        if self.shared_replays is None:
            if not self.replays.claim(replay_key):
                return self._replayed(hook, delivery)
            return self._trigger(hook, verified, headers, replay_key)
        return self._claim_then_trigger(hook, verified, headers, replay_key)

    def _replayed(self, hook: Hook, delivery: str) -> Response:
        log.info("receiver %s (hook %s): delivery %r already handled", hook.who, hook.digest, delivery)
        return self._answer(hook, 200, "replayed")

    async def _claim_then_trigger(
        self, hook: Hook, verified: Verified, headers: RawHeaders, replay_key: str
    ) -> Response:
        assert self.shared_replays is not None and verified.delivery_id is not None
        await on_task()  # the state store's I/O
        try:
            claimed = await self.shared_replays.claim(replay_key)
        except StoreError as exc:  # fail open: a second reconcile request is harmless, a lost one is not
            log.warning("replay window unavailable, handling the delivery anyway: %s", exc)
            claimed = self.replays.claim(replay_key)
        if not claimed:
            return self._replayed(hook, verified.delivery_id)
        return await self._trigger(hook, verified, headers, replay_key)

    async def _release(self, key: str) -> None:
        self.replays.release(key)
        if self.shared_replays is not None:
            with contextlib.suppress(StoreError):  # the window ends by itself
                await self.shared_replays.release(key)

    async def _trigger(
        self, hook: Hook, verified: Verified, headers: RawHeaders, replay_key: str | None
    ) -> Response:
        """Step 10: the filters, then every target. A delivery that did not end in 200 is released from the
        replay window (the sender's retry goes through)."""
        done = False
        try:
            filters = hook.filters
            if isinstance(filters, FilterError):
                log.error(
                    "receiver %s (hook %s): unable to create CEL evaluator: %s",
                    hook.who,
                    hook.digest,
                    filters,
                )
                return self._answer(hook, 500, "error")
            req: dict[str, Any] | None = None
            if filters.configured:
                try:
                    req = request_value(headers, verified.body)
                except RequestBodyError as exc:
                    log.info("receiver %s (hook %s): %s", hook.who, hook.digest, exc)
                    return self._answer(hook, 400, "bad_request")
            start = time.perf_counter()
            try:
                result = await self.trigger.run(
                    hook.receiver, filters, req=req, claims=verified.claims, plan=hook.plan
                )
            finally:
                hook.patch_duration.observe(time.perf_counter() - start)
            if result.errors:
                for error in result.errors:
                    log.error(
                        "receiver %s (hook %s): unable to request reconciliation: %s",
                        hook.who,
                        hook.digest,
                        error,
                    )
                return self._answer(hook, 500, "patch_failed")
            done = True
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "receiver %s (hook %s): handled %s event%s",
                    hook.who,
                    hook.digest,
                    hook.rtype,
                    _event(verified),
                )
            return self._answer(hook, 200, "accepted")
        finally:
            if replay_key is not None and not done:
                await self._release(replay_key)


def _event(verified: Verified) -> str:
    return f" {verified.event!r}" if verified.event else ""


def _digest(request: Request) -> str:
    """The 8-character prefix of a request's path, for a log line (never the path)."""
    return path_digest_prefix(request.target.decode("latin-1"))


def create_receiver_endpoint(
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
    cluster_waits: bool = True,
) -> ReceiverEndpoint:
    """Build the receiver endpoint (``.server()`` is its listener). ``metrics`` (or ``registry``) must not be
    the global default registry. ``cluster_waits`` False: the cluster answers at once (local mode), so a
    webhook is answered without a task (``Trigger.waits``)."""
    if isinstance(metrics, ReceiverMetrics):
        receiver_metrics = metrics
    else:
        target = metrics if metrics is not None else registry
        receiver_metrics = ReceiverMetrics(target if target is not None else CollectorRegistry())
    return ReceiverEndpoint(
        store,
        cluster,
        settings or ReceiverServerSettings(),
        receiver_metrics,
        clock or SystemClock(),
        oidc,
        replay_store=replay_store,
        http=http,
        sandbox=sandbox,
        tracer=tracer,
        cluster_waits=cluster_waits,
    )

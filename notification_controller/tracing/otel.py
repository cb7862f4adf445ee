"""The tracer behind ``--otlp-endpoint``: the OpenTelemetry SDK, OTLP/HTTP protobuf to ``URL/v1/traces``.

Imported only by ``tracing.open_tracer`` when the flag is set (the ``tracing`` extra: ``opentelemetry-sdk``
and ``opentelemetry-exporter-otlp-proto-http``); the SDK's own ``TracerProvider`` is not made the global one,
so two controllers in one process (the tests) keep their traces apart.

Why the SDK and not a home-made encoder (``providers/otel.py`` encodes one span by hand for the otel
Provider type, byte-exact with Flux): here the spans are many, concurrent and batched, and the SDK's batch
processor already has the two properties a dead collector needs —

* **bounded**: finished spans wait in a deque of ``MAX_QUEUE`` (2,048); when the collector does not keep
  up the newest replace the oldest (counted by the SDK, logged here at most once a minute), so memory
  stays flat whatever the collector does;
* **never blocking**: ending a span appends to that deque on the event loop; the export (``requests``, on
  the processor's own thread) waits for the collector at most ``EXPORT_TIMEOUT`` seconds per batch,
  retries included. ``tests/integration/test_tracing.py`` delivers through a collector that never answers.

Sampling is OpenTelemetry's standard ``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG`` (the SDK reads
them): by default ``parentbased_always_on`` — the caller's choice when an event carries a ``traceparent`` (a
``00`` flags field records nothing), else every event; ``parentbased_traceidratio`` with ``0.1`` traces a
tenth of the events that come without one (an unsampled span costs ~6 µs instead of ~45). ``SpanLimits`` bound each span (``MAX_ATTRIBUTES``,
``MAX_EVENTS``, values ``tracing.MAX_VALUE`` characters) on top of the call sites' own bounds. The
exporter reads the standard ``OTEL_EXPORTER_OTLP_HEADERS`` / ``…_TRACES_HEADERS`` (a collector's token) and
``OTEL_EXPORTER_OTLP_CERTIFICATE`` (its CA); proxies from ``HTTPS_PROXY`` as ``requests`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from ..core.redact import redact_url
from ..errors import ConfigError
from . import MAX_VALUE, Span, SpanKind, Tracer, Value, bounded
from .context import parse

log = logging.getLogger(__name__)

MAX_QUEUE = 2048
"""Finished spans waiting for export; beyond it the oldest are dropped (the SDK's default)."""
MAX_BATCH = 512
EXPORT_DELAY = 1.0
"""Seconds between two exports when fewer than ``MAX_BATCH`` spans wait."""
EXPORT_TIMEOUT = 5.0
"""Seconds one export may take, retries included (the SDK's default is 10)."""
MAX_ATTRIBUTES = 32
MAX_EVENTS = 16
LOG_INTERVAL = 60.0
"""Seconds between two log lines of the same kind from the SDK's export thread (a dead collector)."""

_KINDS = {
    SpanKind.INTERNAL: otel_trace.SpanKind.INTERNAL,
    SpanKind.SERVER: otel_trace.SpanKind.SERVER,
    SpanKind.CLIENT: otel_trace.SpanKind.CLIENT,
    SpanKind.PRODUCER: otel_trace.SpanKind.PRODUCER,
    SpanKind.CONSUMER: otel_trace.SpanKind.CONSUMER,
}
_EMPTY = otel_context.Context()
_SDK_LOGGERS = (
    "opentelemetry.sdk._shared_internal",  # "Queue full, dropping span." — once per span otherwise
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",  # "Failed to export span batch…" — once per batch
)


class OTelSpan(Span):
    """A recording span of the SDK (see ``tracing.Span`` for the contract)."""

    __slots__ = ("span",)
    recording = True

    def __init__(self, span: otel_trace.Span) -> None:
        self.span = span

    def set(self, key: str, value: Value) -> None:
        self.span.set_attribute(key, bounded(value))

    def fail(self, reason: str) -> None:
        self.span.set_attribute("error.type", bounded(reason))
        self.span.set_status(Status(StatusCode.ERROR))

    def end(self, end_ns: int | None = None) -> None:
        if self.span.is_recording():
            self.span.end(end_ns)

    @property
    def traceparent(self) -> str:
        ctx = self.span.get_span_context()
        sampled = "01" if ctx.trace_flags.sampled else "00"
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{sampled}"


class _Budget(logging.Filter):
    """At most one record per logger and message every ``LOG_INTERVAL`` seconds (the export thread's
    warnings about a collector that is down would otherwise repeat per span or per batch)."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[tuple[str, object], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        now = time.monotonic()
        if now - self._last.get(key, -LOG_INTERVAL) < LOG_INTERVAL:
            return False
        if len(self._last) > 64:
            self._last.clear()
        self._last[key] = now
        return True


def _budget_sdk_logs() -> None:
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Budget) for f in logger.filters):
            logger.addFilter(_Budget())


def traces_url(endpoint: str) -> str:
    """``URL/v1/traces`` for ``--otlp-endpoint URL`` (OTLP/HTTP's path for traces, appended as the
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` convention does). Raises ``ConfigError`` for anything but http(s)."""
    try:
        parts = urlsplit(endpoint)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--otlp-endpoint {redact_url(endpoint)!s}: an http:// or https:// URL is needed")
    return endpoint.rstrip("/") + "/v1/traces"


class OTelTracer(Tracer):
    """The SDK's tracer with a batch processor and the OTLP/HTTP exporter (see the module docstring)."""

    enabled = True

    def __init__(
        self,
        endpoint: str,
        *,
        service_version: str = "",
        export_timeout: float = EXPORT_TIMEOUT,
        exporter: SpanExporter | None = None,
    ) -> None:
        """``exporter``: where the batches go instead of OTLP/HTTP (tests: the SDK's in-memory exporter)."""
        self.url = traces_url(endpoint)
        resource = Resource.create(
            {"service.name": "notification-controller", "service.version": service_version or "unknown"}
        )
        limits = SpanLimits(
            max_attributes=MAX_ATTRIBUTES,
            max_events=MAX_EVENTS,
            max_links=8,
            max_event_attributes=MAX_ATTRIBUTES,
            max_link_attributes=MAX_ATTRIBUTES,
            max_attribute_length=MAX_VALUE,
        )
        # sampler: OpenTelemetry's OTEL_TRACES_SAMPLER/_ARG (the SDK reads them), by default parentbased_always_on
        self.provider = TracerProvider(resource=resource, span_limits=limits)
        self.processor = BatchSpanProcessor(
            exporter or OTLPSpanExporter(endpoint=self.url, timeout=export_timeout),
            max_queue_size=MAX_QUEUE,
            max_export_batch_size=MAX_BATCH,
            schedule_delay_millis=EXPORT_DELAY * 1000,
        )
        self.provider.add_span_processor(self.processor)
        self._tracer = self.provider.get_tracer("notification_controller", service_version or None)
        _budget_sdk_logs()
        log.info("tracing: spans go to %s (OTLP/HTTP protobuf)", redact_url(self.url))

    def start(
        self,
        name: str,
        *,
        parent: Span | str | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Value] | None = None,
        start_ns: int | None = None,
    ) -> Span:
        if isinstance(parent, OTelSpan):
            ctx = otel_trace.set_span_in_context(parent.span, _EMPTY)
        elif isinstance(parent, str) and parent:
            remote = parse(parent)
            ctx = _EMPTY
            if remote is not None:
                flags = TraceFlags(TraceFlags.SAMPLED if remote.sampled else TraceFlags.DEFAULT)
                span_context = SpanContext(remote.trace_id, remote.span_id, is_remote=True, trace_flags=flags)
                ctx = otel_trace.set_span_in_context(NonRecordingSpan(span_context), _EMPTY)
        else:
            ctx = _EMPTY
        span = self._tracer.start_span(
            name,
            context=ctx,
            kind=_KINDS[kind],
            attributes={k: bounded(v) for k, v in attributes.items()} if attributes else None,
            start_time=start_ns,
        )
        return OTelSpan(span)

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Export what waits and stop, waiting at most ``timeout`` seconds: the SDK's shutdown runs on a
        daemon thread of its own (not the loop's executor, whose shutdown ``asyncio.run`` would wait for),
        so a collector that hangs holds neither the loop nor the exit."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        def stop() -> None:
            try:
                self.provider.shutdown()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed after the timeout
                    loop.call_soon_threadsafe(finished)

        threading.Thread(target=stop, name="otlp-shutdown", daemon=True).start()
        try:
            await asyncio.wait_for(done, timeout)
        except TimeoutError:
            log.warning("tracing: the collector did not take the last spans within %gs; dropped", timeout)


__all__ = ["OTelSpan", "OTelTracer", "traces_url"]

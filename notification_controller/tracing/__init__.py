"""Traces through the pipeline (issue 28, docs/tracing.md): the facade every call site uses.

With ``--otlp-endpoint URL`` the controller sends one trace per event to ``URL/v1/traces`` (OTLP/HTTP
protobuf): the POST that brought it (a server span continuing the client's W3C ``traceparent``), matching,
each stage that acted, the queue or the durable outbox, and every delivery attempt. Without the flag —
the default — ``NOOP`` is the tracer: no OpenTelemetry module is imported (``otel.py`` is imported by
``open_tracer`` only), the builder leaves the stage lists, the matcher and the queue unwrapped
(``dispatch/traced.py``), and the event server, the webhook server and the deliverer test one boolean
(``tracing``) where they would start a span. Measured (``python -m timeit``, the reference machine: 2 shared
cores): such a test costs 36 ns, and an event that is delivered passes four of them — ~0.15 µs against the
50–70 µs of CPU the bench measures per event (``NOOP.start(...)`` with attributes, for a caller that did
not test first, costs 317 ns). On, the SDK costs ~20–25 µs per span to make and about as much again to
encode and export on its thread; docs/tracing.md has the bench's numbers.

What a call site sees:

* ``Tracer.start(name, parent=…, kind=…, attributes=…, start_ns=…)`` → a ``Span`` (``NOOP_SPAN`` when off);
  ``parent`` is a ``Span`` of this process, or the text of a ``traceparent`` (a notification read back
  from the outbox carries one), or None (a new trace).
* ``Span.set(key, value)``, ``Span.fail(reason)``, ``Span.end()``, ``Span.traceparent`` (the header value
  naming this span, for the next hop).
* ``CURRENT``: the span the running work belongs to (the ingest span while the event is matched and its
  pre-queue stages run, the delivery span while a delivery's pre-send stages run). Tasks copy it when
  they are created, so work the event's handler spawns stays in its trace.

Attribute values are bounded by ``bounded`` (strings cut to ``MAX_VALUE`` characters: an event's fields
are a tenant's, and a span must not become as large as a 3 MiB message); the SDK's ``SpanLimits`` cap the
number of attributes and events again (``otel.py``). No Secret reaches an attribute: call sites pass
object references, provider types, reasons and status codes, and texts through the Redactor.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from contextvars import ContextVar
from typing import ClassVar

from ..errors import ConfigError

Value = str | int | float | bool
MAX_VALUE = 256
"""Characters kept of a string attribute (the rest is cut; ``…`` marks the cut)."""


class SpanKind(enum.Enum):
    """OpenTelemetry's span kinds (``opentelemetry.trace.SpanKind``, without importing it)."""

    INTERNAL = 0
    SERVER = 1
    CLIENT = 2
    PRODUCER = 3
    CONSUMER = 4


def bounded(value: Value) -> Value:
    """``value`` with a string cut to ``MAX_VALUE`` characters."""
    if isinstance(value, str) and len(value) > MAX_VALUE:
        return value[: MAX_VALUE - 1] + "…"
    return value


class Span:
    """A span that records nothing (tracing off, or a trace its caller did not sample)."""

    __slots__ = ()
    recording: ClassVar[bool] = False

    def set(self, key: str, value: Value) -> None:
        """One attribute (bounded)."""

    def fail(self, reason: str) -> None:
        """Mark the span failed: status ERROR and ``error.type`` = ``reason`` (a ``FailureReason``, a drop
        reason: a word from our vocabulary, never an error text)."""

    def end(self, end_ns: int | None = None) -> None:
        """End it (``end_ns``: epoch nanoseconds, default now). Ending twice is harmless."""

    @property
    def traceparent(self) -> str:
        """The W3C ``traceparent`` naming this span ("" when tracing is off)."""
        return ""


NOOP_SPAN = Span()

CURRENT: ContextVar[Span | None] = ContextVar("notification_controller_trace_span", default=None)
"""The span the running work belongs to (see the module docstring); None outside a trace."""


def current() -> Span:
    """``CURRENT``'s span, or ``NOOP_SPAN``."""
    return CURRENT.get() or NOOP_SPAN


class Tracer:
    """The no-op tracer (``--otlp-endpoint`` not set): ``enabled`` is False and nothing is recorded."""

    enabled: ClassVar[bool] = False

    def start(
        self,
        name: str,
        *,
        parent: Span | str | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Value] | None = None,
        start_ns: int | None = None,
    ) -> Span:
        """A new span, started now (or at ``start_ns``); see the module docstring."""
        return NOOP_SPAN

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Export what is buffered, within ``timeout`` seconds, and stop."""


NOOP = Tracer()


def open_tracer(endpoint: str, *, service_version: str = "") -> Tracer:
    """The tracer for ``--otlp-endpoint``: ``NOOP`` when empty, else the OpenTelemetry SDK's (imported now).
    Raises ``ConfigError`` (one line) when the endpoint is not an http(s) URL or the ``tracing`` extra is
    not installed."""
    if not endpoint:
        return NOOP
    try:
        from .otel import OTelTracer
    except ImportError as exc:
        raise ConfigError(
            "--otlp-endpoint needs the OpenTelemetry SDK: install the tracing extra "
            f"(pip install 'notification-controller[tracing]'); {type(exc).__name__}: {exc}"
        ) from None
    return OTelTracer(endpoint, service_version=service_version)


__all__ = [
    "CURRENT",
    "MAX_VALUE",
    "NOOP",
    "NOOP_SPAN",
    "Span",
    "SpanKind",
    "Tracer",
    "Value",
    "bounded",
    "current",
    "open_tracer",
]

"""One-line Prometheus metric declarations, always on an explicit registry (never the global default).

``counter``, ``gauge`` and ``histogram`` take (registry, name, help, labels) in that order; a histogram names
its buckets. ``http_server_metrics`` declares go-http-metrics' families of one HTTP server, as Flux's
controllers export them (``gotk_event_http_*``, ``gotk_receiver_http_*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# prometheus/client_golang's DefBuckets (seconds), go-http-metrics' duration buckets.
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# go-http-metrics' response size buckets: prometheus.ExponentialBuckets(100, 10, 8), 100 B to 1 GB.
SIZE_BUCKETS = tuple(100.0 * 10**i for i in range(8))
HTTP_LABELS = ("service", "handler", "method", "code")


def counter(
    registry: CollectorRegistry, name: str, documentation: str, labels: Sequence[str] = ()
) -> Counter:
    return Counter(name, documentation, labels, registry=registry)


def gauge(registry: CollectorRegistry, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
    return Gauge(name, documentation, labels, registry=registry)


def histogram(
    registry: CollectorRegistry,
    name: str,
    documentation: str,
    labels: Sequence[str] = (),
    *,
    buckets: Sequence[float],
) -> Histogram:
    return Histogram(name, documentation, labels, buckets=buckets, registry=registry)


@overload
def http_server_metrics(
    registry: CollectorRegistry, prefix: str, noun: str
) -> tuple[Histogram, Histogram, Gauge]: ...
@overload
def http_server_metrics(
    registry: CollectorRegistry, prefix: str, noun: str, *, response_size: Literal[False]
) -> tuple[Histogram, None, Gauge]: ...
def http_server_metrics(
    registry: CollectorRegistry, prefix: str, noun: str, *, response_size: bool = True
) -> tuple[Histogram, Histogram | None, Gauge]:
    """(request duration, response size, requests in flight) of the server ``prefix`` (``gotk_event``),
    registered in that order; ``noun`` names the server in the help texts (``event server``). The first two
    are labelled ``HTTP_LABELS``, the gauge ``service`` and ``handler``. ``response_size=False``: no size
    histogram (``None``)."""
    duration = histogram(
        registry,
        f"{prefix}_http_request_duration_seconds",
        f"Duration of {noun} HTTP requests.",
        HTTP_LABELS,
        buckets=DEFAULT_BUCKETS,
    )
    size = None
    if response_size:
        size = histogram(
            registry,
            f"{prefix}_http_response_size_bytes",
            f"Size of {noun} HTTP responses.",
            HTTP_LABELS,
            buckets=SIZE_BUCKETS,
        )
    inflight = gauge(
        registry,
        f"{prefix}_http_requests_inflight",
        f"{noun[:1].upper()}{noun[1:]} requests being served.",
        HTTP_LABELS[:2],
    )
    return duration, size, inflight

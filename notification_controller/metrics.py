"""Prometheus metrics of the event path, on a registry owned by the app (never the global default).

Flux-compatible names where Flux has them (``gotk_event_http_*``), ``notification_*`` for what Flux
does not measure: deliveries by provider type and outcome, drops (never silent), and latency.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SIZE_BUCKETS = tuple(100.0 * 10**i for i in range(8))


class EventMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.http_duration = Histogram(
            "gotk_event_http_request_duration_seconds",
            "Duration of event server HTTP requests.",
            ["service", "handler", "method", "code"],
            buckets=DEFAULT_BUCKETS,
            registry=registry,
        )
        self.http_size = Histogram(
            "gotk_event_http_response_size_bytes",
            "Size of event server HTTP responses.",
            ["service", "handler", "method", "code"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.http_inflight = Gauge(
            "gotk_event_http_requests_inflight",
            "Event server requests being served.",
            ["service", "handler"],
            registry=registry,
        )
        self.events_received = Counter(
            "notification_events_received_total", "Events accepted for processing (202).", registry=registry
        )
        self.events_rejected = Counter(
            "notification_events_rejected_total",
            "Event requests refused, by reason (bad_request, too_large, rate_limited, not_ready, method).",
            ["reason"],
            registry=registry,
        )
        self.events_unmatched = Counter(
            "notification_events_unmatched_total",
            "Accepted events that no Alert took (sources, severity, inclusion/exclusion).",
            registry=registry,
        )
        self.notifications = Counter(
            "notification_notifications_total",
            "Notifications handed to a provider lane (one per matching Alert).",
            ["provider_type"],
            registry=registry,
        )
        self.delivered = Counter(
            "notification_delivered_total",
            "Notifications delivered successfully.",
            ["provider_type"],
            registry=registry,
        )
        self.failed = Counter(
            "notification_delivery_failed_total",
            "Notifications whose delivery failed, by reason.",
            ["provider_type", "reason"],
            registry=registry,
        )
        self.dropped = Counter(
            "notification_dropped_total",
            "Notifications dropped on purpose, by reason (overload, shutdown, suspended, commit_status, "
            "change_request, hook, config, label_lookup, label_lookup_overload, label_lookup_rejected).",
            ["provider_type", "reason"],
            registry=registry,
        )
        self.delivery_duration = Histogram(
            "notification_delivery_duration_seconds",
            "Time from hand-off to the end of delivery (all attempts).",
            ["provider_type"],
            buckets=(*DEFAULT_BUCKETS, 15.0, 30.0),
            registry=registry,
        )
        self.pending = Gauge(
            "notification_pending", "Notifications queued or being delivered.", registry=registry
        )
        self.label_lookups = Counter(
            "notification_label_lookups_total",
            "Involved-object label lookups for label-selected Alerts, by result (hit, fetched, shared, "
            "not_found, error, timeout, overload, rejected).",
            ["result"],
            registry=registry,
        )
        self.label_fetches = Counter(
            "notification_label_fetches_total",
            "API GETs made for involved-object labels, by outcome (ok, not_found, error, timeout).",
            ["outcome"],
            registry=registry,
        )
        self.label_cache_entries = Gauge(
            "notification_label_cache_entries",
            "Objects whose labels (or absence) are cached for label-selected Alerts.",
            registry=registry,
        )

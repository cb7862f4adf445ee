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
        self.suppressed = Counter(
            "notification_suppressed_total",
            "Matched events that did not notify because of an Alert's noise control, by reason (filter, "
            "threshold, state, repeat, grouped).",
            ["reason"],
            registry=registry,
        )
        self.template_errors = Counter(
            "notification_template_errors_total",
            "Templates that failed to render at send time (the default was sent), by template (title, message, "
            "body).",
            ["template"],
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


class DeliveryMetrics:
    """Durable delivery (``--store``): the outbox, attempts, dead letters, the store itself (docs/metrics.md)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.outbox_depth = Gauge(
            "notification_outbox_depth",
            "Notifications in the durable outbox, per Provider (due, waiting for a retry, or being sent).",
            ["provider"],
            registry=registry,
        )
        self.outbox_oldest = Gauge(
            "notification_outbox_oldest_age_seconds",
            "Age of the oldest notification in the durable outbox, per Provider.",
            ["provider"],
            registry=registry,
        )
        self.attempts = Counter(
            "notification_delivery_attempts_total",
            "Delivery attempts from the durable outbox (first attempts and retries).",
            ["provider_type"],
            registry=registry,
        )
        self.redeliveries = Counter(
            "notification_redeliveries_total",
            "Attempts after the first for the same notification (retries, or a lease taken over from a lost "
            "worker).",
            ["provider_type"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "notification_dead_letters_total",
            "Notifications given up on and kept as dead letters, by reason (max-age, permanent).",
            ["provider_type", "reason"],
            registry=registry,
        )
        self.breaker_open = Gauge(
            "notification_circuit_breaker_open",
            "1 while a Provider's lane is paused by its circuit breaker (open or probing), else 0.",
            ["provider"],
            registry=registry,
        )
        self.store_errors = Counter(
            "notification_store_errors_total",
            "State store operations that failed (the store was unreachable or refused), by operation.",
            ["store", "operation"],
            registry=registry,
        )
        self.store_duration = Histogram(
            "notification_store_operation_duration_seconds",
            "Duration of state store operations, by operation.",
            ["store", "operation"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0),
            registry=registry,
        )

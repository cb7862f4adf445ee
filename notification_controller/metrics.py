"""Prometheus metrics of the event path, on a registry owned by the app (never the global default).

Flux-compatible names where Flux has them (``gotk_event_http_*``), ``notification_*`` for what Flux
does not measure: deliveries by provider type and outcome, drops (never silent), and latency.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.values import MutexValue

from .lib.buildinfo import python_version, version
from .lib.promdefs import DEFAULT_BUCKETS, counter, gauge, histogram, http_server_metrics

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""``notification_delivery_latency_seconds``: 50 ms (a local webhook) to 5 minutes (retries with backoff);
30 s is a bound, so "delivered within 30 s" (the objective in config/monitoring) is read exactly."""


# ---- the per-notification children, without prometheus_client's locks --------------------------------------
class Inc(Protocol):
    def inc(self, amount: float = 1.0) -> None: ...


class Observe(Protocol):
    def observe(self, amount: float) -> None: ...


class LoopCounter:
    """A ``Counter`` child that the event loop's thread alone increments (every notification's: received,
    handed to a lane, delivered), written without the child's lock: prometheus_client's ``inc`` checks the
    child, then takes a ``threading.Lock`` around ``+=`` (~400 ns; this ~70 ns, ``timeit``). A scrape reads the
    same cell under that lock; one writer thread loses no increment. ``tests/unit/test_metrics.py`` fails if
    prometheus_client stores its values differently (then ``loop_counter`` falls back to the child itself)."""

    __slots__ = ("_cell",)

    def __init__(self, cell: MutexValue) -> None:
        self._cell = cell

    def inc(self, amount: float = 1.0) -> None:
        self._cell._value += amount


class LoopHistogram:
    """``LoopCounter``'s histogram: the bucket found by ``bisect`` over the bounds (the first bound >= the
    value, as prometheus_client's loop finds it), one ``+=`` there and one on the sum (~900 ns -> ~160 ns).
    Durations only: a NaN would land in the first bucket instead of none."""

    __slots__ = ("_bounds", "_buckets", "_sum")

    def __init__(self, bounds: list[float], buckets: list[MutexValue], total: MutexValue) -> None:
        self._bounds = bounds
        self._buckets = buckets
        self._sum = total

    def observe(self, amount: float) -> None:
        self._sum._value += amount
        self._buckets[bisect_left(self._bounds, amount)]._value += 1.0


def loop_counter(child: Counter) -> Inc:
    """``child`` (labelled already, or a metric without labels) incremented on the loop's thread only."""
    cell = getattr(child, "_value", None)
    return LoopCounter(cell) if type(cell) is MutexValue else child


def loop_histogram(child: Histogram) -> Observe:
    """``child`` (labelled already) observed on the loop's thread only."""
    bounds, buckets, total = (getattr(child, a, None) for a in ("_upper_bounds", "_buckets", "_sum"))
    if (
        type(total) is MutexValue
        and isinstance(bounds, list | tuple)
        and isinstance(buckets, list)
        and len(bounds) == len(buckets)
        and all(type(b) is MutexValue for b in buckets)
    ):
        return LoopHistogram([float(b) for b in bounds], buckets, total)
    return child


class EventMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        # Which build answers (docs/install.md, upgrades): `max by (version) (notification_controller_build_info)`.
        self.build_info = gauge(
            registry,
            "notification_controller_build_info",
            "Always 1; the labels name the running build (version from the package metadata, Python).",
            ["version", "python"],
        )
        self.build_info.labels(version=version(), python=python_version()).set(1)
        self.http_duration, self.http_size, self.http_inflight = http_server_metrics(
            registry, "gotk_event", "event server"
        )
        self.events_received = counter(
            registry, "notification_events_received_total", "Events accepted for processing (202)."
        )
        self.events_rejected = counter(
            registry,
            "notification_events_rejected_total",
            "Event requests refused, by reason (bad_request, too_large, rate_limited, not_ready, method).",
            ["reason"],
        )
        self.events_unmatched = counter(
            registry,
            "notification_events_unmatched_total",
            "Accepted events that no Alert took (sources, severity, inclusion/exclusion).",
        )
        self.notifications = counter(
            registry,
            "notification_notifications_total",
            "Notifications handed to a provider lane (one per matching Alert).",
            ["provider_type"],
        )
        # ``provider`` (namespace/name) tells three Slack Providers apart; bounded by the Providers: the
        # Reporter removes a deleted Provider's series (dispatch/report.py, ProviderSeries).
        self.delivered = counter(
            registry,
            "notification_delivered_total",
            "Notifications delivered successfully, by provider type and Provider (namespace/name).",
            ["provider_type", "provider"],
        )
        self.failed = counter(
            registry,
            "notification_delivery_failed_total",
            "Notifications whose delivery failed, by provider type, Provider (namespace/name) and reason.",
            ["provider_type", "provider", "reason"],
        )
        self.dropped = counter(
            registry,
            "notification_dropped_total",
            "Notifications dropped on purpose, by reason (overload, shutdown, suspended, commit_status, "
            "change_request, hook, config, label_lookup, label_lookup_overload, label_lookup_rejected).",
            ["provider_type", "reason"],
        )
        self.suppressed = counter(
            registry,
            "notification_suppressed_total",
            "Matched events that did not notify because of an Alert's noise control, by reason (filter, "
            "threshold, state, repeat, grouped).",
            ["reason"],
        )
        self.template_errors = counter(
            registry,
            "notification_template_errors_total",
            "Templates that failed to render at send time (the default was sent), by template (title, message, "
            "body).",
            ["template"],
        )
        self.delivery_duration = histogram(
            registry,
            "notification_delivery_duration_seconds",
            "Time from hand-off to the end of delivery (all attempts).",
            ["provider_type"],
            buckets=(*DEFAULT_BUCKETS, 15.0, 30.0),
        )
        # The delivery-latency objective (docs/monitoring.md): from the event's receipt (wall clock, kept in
        # the stored notification across the outbox and restarts) to its successful delivery. By provider
        # type only, as the duration above: per Provider it would be 13 series per Provider; which Provider
        # is slow is in notification_delivered_total/notification_delivery_failed_total{provider}.
        self.delivery_latency = histogram(
            registry,
            "notification_delivery_latency_seconds",
            "Time from the event's receipt by the controller to its notification's successful delivery "
            "(queue, outbox, retries and attempts included), by provider type.",
            ["provider_type"],
            buckets=LATENCY_BUCKETS,
        )
        self.pending = gauge(registry, "notification_pending", "Notifications queued or being delivered.")
        self.heartbeats = counter(  # Alert spec.heartbeat (dispatch/heartbeat.py, docs/monitoring.md)
            registry,
            "notification_heartbeats_total",
            "Alert heartbeats this replica made and queued (sent), or could not because the state store failed "
            "(store_error) or something else did (error); their deliveries count as every notification's.",
            ["outcome"],
        )
        self.label_lookups = counter(
            registry,
            "notification_label_lookups_total",
            "Involved-object label lookups for label-selected Alerts, by result (hit, fetched, shared, "
            "not_found, error, timeout, overload, rejected).",
            ["result"],
        )
        self.label_fetches = counter(
            registry,
            "notification_label_fetches_total",
            "API GETs made for involved-object labels, by outcome (ok, not_found, error, timeout).",
            ["outcome"],
        )
        self.label_cache_entries = gauge(
            registry,
            "notification_label_cache_entries",
            "Objects whose labels (or absence) are cached for label-selected Alerts.",
        )


class DeliveryMetrics:
    """Durable delivery (``--store``): the outbox, attempts, dead letters, the store itself (docs/metrics.md)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.outbox_depth = gauge(
            registry,
            "notification_outbox_depth",
            "Notifications in the durable outbox, per Provider (due, waiting for a retry, or being sent).",
            ["provider"],
        )
        self.outbox_oldest = gauge(
            registry,
            "notification_outbox_oldest_age_seconds",
            "Age of the oldest notification in the durable outbox, per Provider.",
            ["provider"],
        )
        self.attempts = counter(
            registry,
            "notification_delivery_attempts_total",
            "Delivery attempts from the durable outbox (first attempts and retries).",
            ["provider_type"],
        )
        self.redeliveries = counter(
            registry,
            "notification_redeliveries_total",
            "Attempts after the first for the same notification (retries, or a lease taken over from a lost "
            "worker).",
            ["provider_type"],
        )
        self.dead_letters = counter(
            registry,
            "notification_dead_letters_total",
            "Notifications given up on and kept as dead letters, by provider type, Provider (namespace/name) "
            "and reason (max-age, permanent).",
            ["provider_type", "provider", "reason"],
        )
        self.breaker_open = gauge(
            registry,
            "notification_circuit_breaker_open",
            "1 while a Provider's lane is paused by its circuit breaker (open or probing), else 0.",
            ["provider"],
        )
        self.store_errors = counter(
            registry,
            "notification_store_errors_total",
            "State store operations that failed (the store was unreachable or refused), by operation.",
            ["store", "operation"],
        )
        self.store_duration = histogram(
            registry,
            "notification_store_operation_duration_seconds",
            "Duration of state store operations, by operation.",
            ["store", "operation"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0),
        )


class NoiseMetrics:
    """Noise control's own state (docs/noise-control.md): how many keys it tracks, and what it refused to."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.untracked = counter(
            registry,
            "notification_noise_untracked_total",
            "Events noise control let through without its state, by stage (threshold, state, repeat, group, "
            "thread) and reason (key_limit, group_limit: the Alert's cap was reached; store_error).",
            ["stage", "reason"],
        )
        self.keys = gauge(
            registry,
            "notification_noise_keys",
            "Noise-control keys this process wrote that have not expired yet, by kind (keys: threshold, "
            "state and repeat keys; groups).",
            ["kind"],
        )
        self.store_keys = gauge(
            registry,
            "notification_noise_store_keys",
            "Keys held by the in-process noise store (--store=memory), expired ones deleted.",
        )
        self.in_place = counter(  # resolveInPlace (dispatch/quiet/inplace.py)
            registry,
            "notification_resolve_in_place_total",
            "resolveInPlace deliveries by provider type and outcome: recorded (a failure's message id kept), "
            "edited (a recovery edited it), fallback (the edit failed: the recovery was posted as a new "
            "message), rejected (an answer's message id was refused), store_error.",
            ["type", "outcome"],
        )


class InhibitMetrics:
    """Inhibition's own state (docs/silences.md, "Inhibition"): the graph it knows, what it let through."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.graph_objects = gauge(
            registry,
            "notification_inhibit_graph_objects",
            "Kustomizations, HelmReleases and HelmCharts whose sourceRef/dependsOn edges inhibition tracks.",
        )
        self.graph_untracked = gauge(
            registry,
            "notification_inhibit_graph_untracked",
            "Objects not tracked because the graph holds its limit (10,000) already: their dependents' errors "
            "are not inhibited.",
        )
        self.untracked = counter(
            registry,
            "notification_inhibit_untracked_total",
            "Notifications inhibition let through without its state, by reason (alert_limit, rule_limit, "
            "release_limit: a bound was reached; store_error).",
            ["reason"],
        )


class HistoryMetrics:
    """The history of decisions (docs/history.md): what was recorded, what the recorder had to drop.

    ``records`` is counted in plain integers and read when scraped (``_RecordCounts``): a labelled
    ``Counter.inc`` (a lock and two calls, ~1.5 µs) was a sixth of what recording an event cost, and the
    budget is 10 % of the CPU per event (issue 27). ``recorded`` runs on the event loop only."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.counts: dict[str, int] = {}
        registry.register(_RecordCounts(self.counts))
        self.dropped = counter(
            registry,
            "notification_history_dropped_total",
            "Decisions not recorded because the recorder's buffer was full or the history store failed.",
        )

    def recorded(self, outcome: str) -> None:
        """``notification_history_records_total{outcome}`` + 1."""
        counts = self.counts
        counts[outcome] = counts.get(outcome, 0) + 1


class _RecordCounts(Collector):
    """``notification_history_records_total{outcome}`` from ``HistoryMetrics.counts`` at scrape time."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> list[Metric]:
        family = self._family()
        for outcome, value in sorted(self.counts.copy().items()):
            family.add_metric([outcome], value)
        return [family]

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "notification_history_records",
            "Decisions recorded in the history, by outcome (delivered, retrying, failed, dead_lettered, "
            "suppressed, dropped, unmatched, duplicate, refused).",
            labels=["outcome"],
        )

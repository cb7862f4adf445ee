"""The reconcilers' metrics, named and labelled as Flux's controllers export them.

* ``gotk_reconcile_duration_seconds{kind,name,namespace}`` stored compactly (``CompactHistogram``). Flux
  exports one histogram per object. With prometheus_client's ``Histogram`` that is a child object with 13
  locks and value cells per object: ~4 KB each, 39 MB for 10 000 objects (measured by ``make bench``). This
  collector keeps, per object, one list of bucket counts and a sum, and renders the same series.
* ``controller_runtime_*`` (``ControllerRuntimeMetrics``) and ``workqueue_*`` (``WorkQueueMetrics``): what
  controller-runtime and client-go register in every Flux controller, with the same names, labels, buckets
  and semantics, so Flux's monitoring guide, dashboards and alerts work unchanged. The ``controller`` (and
  the queue's ``name``) is the lowercase kind: ``alert``, ``provider``, ``receiver``. The process metrics
  (``process_*``) are prometheus_client's ``ProcessCollector``, on the same registry as in controller-runtime.
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Callable, Hashable, Iterator, Sequence

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from ..lib.promdefs import counter, gauge, histogram

_Key = tuple[str, str, str]  # (kind, name, namespace)


class CompactHistogram(Collector):
    """A labelled histogram with a fixed label set (kind, name, namespace) and cumulative rendering."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = [float(b) for b in buckets if b != float("inf")]
        # per key: [count in each finite bucket..., count above the last bound], then the sum separately
        self._counts: dict[_Key, list[int]] = {}
        self._sums: dict[_Key, float] = {}

    def observe(self, kind: str, name: str, namespace: str, value: float) -> None:
        key = (kind, name, namespace)
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = [0] * (len(self.bounds) + 1)
            self._sums[key] = 0.0
        counts[bisect.bisect_left(self.bounds, value)] += 1
        self._sums[key] += value

    def remove(self, kind: str, name: str, namespace: str) -> None:
        key = (kind, name, namespace)
        self._counts.pop(key, None)
        self._sums.pop(key, None)

    def __len__(self) -> int:
        return len(self._counts)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["kind", "name", "namespace"])
        for key, counts in list(self._counts.items()):
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip(self.bounds, counts, strict=False):
                cumulative += count
                buckets.append((_format(bound), float(cumulative)))
            cumulative += counts[-1]
            buckets.append(("+Inf", float(cumulative)))
            family.add_metric(
                list(key), buckets, self._sums.get(key, 0.0)
            )  # removed meanwhile: scrape runs in a thread
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=["kind", "name", "namespace"])


def _format(bound: float) -> str:
    return repr(bound) if bound != int(bound) else f"{bound:.1f}"


# controller-runtime's pkg/internal/controller/metrics buckets (seconds).
RECONCILE_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0,
    40.0, 50.0, 60.0,
)  # fmt: skip
# client-go's workqueue buckets: prometheus.ExponentialBuckets(10e-9, 10, 12), 10 ns to 1000 s.
WORKQUEUE_BUCKETS = tuple(10e-9 * 10.0**i for i in range(12))
RESULTS = ("error", "requeue_after", "requeue", "success")


class ControllerRuntimeMetrics:
    """``controller_runtime_*`` of controller-runtime, per controller (the lowercase kind)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.total = counter(
            registry,
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
        )
        self.errors = counter(
            registry,
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
        )
        self.panics = counter(
            registry,
            "controller_runtime_reconcile_panics_total",
            "Total number of reconciliation panics per controller",
            ["controller"],
        )
        self.time = histogram(
            registry,
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=RECONCILE_TIME_BUCKETS,
        )
        self.max_concurrent = gauge(
            registry,
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
        )
        self.active_workers = gauge(
            registry,
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
        )
        # controller-runtime's registry also carries the process collector; a registry that has one
        # already (prometheus_client's global default) keeps it.
        with contextlib.suppress(ValueError):
            ProcessCollector(registry=registry)

    def init_controller(self, controller: str, workers: int) -> None:
        """Every series at 0 from the start, as controller-runtime's ``initMetrics`` does."""
        for result in RESULTS:
            self.total.labels(controller, result)
        self.errors.labels(controller)
        self.panics.labels(controller)
        self.active_workers.labels(controller).set(0)
        self.max_concurrent.labels(controller).set(workers)

    def observe(self, controller: str, result: str, seconds: float, *, panic: bool = False) -> None:
        """One reconcile ended with ``result`` (one of ``RESULTS``); ``panic``: it raised a bug."""
        self.total.labels(controller, result).inc()
        if result == "error":
            self.errors.labels(controller).inc()
        if panic:
            self.panics.labels(controller).inc()
        self.time.labels(controller).observe(seconds)


class WorkQueueMetrics:
    """client-go's ``workqueue_*`` families as controller-runtime registers them (labels ``name`` and
    ``controller``, both the controller's name; ``depth`` also has an empty ``priority``)."""

    def __init__(self, registry: CollectorRegistry, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        labels = ["name", "controller"]
        self.depth = gauge(
            registry,
            "workqueue_depth",
            "Current depth of workqueue by workqueue and priority",
            [*labels, "priority"],
        )
        self.adds = counter(
            registry, "workqueue_adds_total", "Total number of adds handled by workqueue", labels
        )
        self.latency = histogram(
            registry,
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels,
            buckets=WORKQUEUE_BUCKETS,
        )
        self.work_duration = histogram(
            registry,
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            labels,
            buckets=WORKQUEUE_BUCKETS,
        )
        self.unfinished = gauge(
            registry,
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
            "threads by observing the rate at which this increases.",
            labels,
        )
        self.longest = gauge(
            registry,
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels,
        )
        self.retries = counter(
            registry, "workqueue_retries_total", "Total number of retries handled by workqueue", labels
        )

    def for_queue(self, name: str) -> QueueMetrics:
        return QueueMetrics(self, name)


class QueueMetrics:
    """The metrics of one queue, fed by ``WorkQueue`` exactly where client-go's ``queueMetrics`` is.

    ``added`` (a key not already waiting), ``got`` (handed to a worker), ``done`` (worker finished),
    ``retried`` (every ``add_after``, as client-go's delaying queue counts it). The two in-progress gauges
    are computed when scraped instead of by client-go's 500 ms ticker.
    """

    def __init__(self, family: WorkQueueMetrics, name: str) -> None:
        self._clock = family.clock
        self._depth = family.depth.labels(name, name, "")
        self._adds = family.adds.labels(name, name)
        self._latency = family.latency.labels(name, name)
        self._work = family.work_duration.labels(name, name)
        self._retries = family.retries.labels(name, name)
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}
        family.unfinished.labels(name, name).set_function(self._unfinished)
        family.longest.labels(name, name).set_function(self._longest)

    def added(self, key: Hashable) -> None:
        self._adds.inc()
        self._depth.inc()
        self._added_at.setdefault(key, self._clock())

    def got(self, key: Hashable) -> None:
        now = self._clock()
        self._depth.dec()
        self._started_at[key] = now
        added = self._added_at.pop(key, None)
        if added is not None:
            self._latency.observe(now - added)

    def done(self, key: Hashable) -> None:
        started = self._started_at.pop(key, None)
        if started is not None:
            self._work.observe(self._clock() - started)

    def retried(self) -> None:
        self._retries.inc()

    def dropped(self, count: int) -> None:
        """Shutdown dropped ``count`` waiting keys."""
        self._depth.dec(count)
        self._added_at.clear()

    def _unfinished(self) -> float:
        now = self._clock()
        return sum(now - started for started in self._started_at.values())

    def _longest(self) -> float:
        now = self._clock()
        return max((now - started for started in self._started_at.values()), default=0.0)

"""The lock-free metric children of the per-notification path (``metrics.LoopCounter``, ``LoopHistogram``):
what a scrape shows is what prometheus_client's own ``inc``/``observe`` would have shown. These tests fail when
prometheus_client stores its values differently (the children then fall back to the library's own)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from notification_controller.lib.promdefs import DEFAULT_BUCKETS
from notification_controller.metrics import (
    LATENCY_BUCKETS,
    EventMetrics,
    LoopCounter,
    LoopHistogram,
    loop_counter,
    loop_histogram,
)


def _scrape(registry: CollectorRegistry) -> list[bytes]:
    """The exposition without the ``_created`` series (each metric's creation time)."""
    return [line for line in generate_latest(registry).splitlines() if b"_created" not in line]


def _pair(buckets: tuple[float, ...]) -> tuple[CollectorRegistry, Histogram, CollectorRegistry, Histogram]:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    return (
        ours,
        Histogram("h", "h", ["t"], buckets=buckets, registry=ours),
        theirs,
        Histogram("h", "h", ["t"], buckets=buckets, registry=theirs),
    )


@given(
    st.sampled_from([DEFAULT_BUCKETS, LATENCY_BUCKETS, (1.0, 10.0, 100.0)]),
    st.lists(
        st.one_of(
            st.floats(min_value=0, max_value=1e4, allow_nan=False),
            st.sampled_from([0.0, 0.005, 0.05, 1.0, 2.5, 30.0, 300.0, math.inf]),  # on a bound: its bucket
        ),
        max_size=40,
    ),
)
def test_a_loop_histogram_scrapes_as_the_library_s_own(
    buckets: tuple[float, ...], values: list[float]
) -> None:
    ours, mine, theirs, reference = _pair(buckets)
    fast = loop_histogram(mine.labels(t="generic"))
    assert isinstance(fast, LoopHistogram)  # prometheus_client's cells are still MutexValues
    child = reference.labels(t="generic")
    for value in values:
        fast.observe(value)
        child.observe(value)
    assert _scrape(ours) == _scrape(theirs)


def test_a_loop_counter_scrapes_as_the_library_s_own_labelled_or_not() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    plain, labelled = Counter("c", "c", registry=ours), Counter("d", "d", ["t"], registry=ours)
    plain_ref, labelled_ref = Counter("c", "c", registry=theirs), Counter("d", "d", ["t"], registry=theirs)
    fast_plain, fast_labelled = loop_counter(plain), loop_counter(labelled.labels(t="x"))
    assert isinstance(fast_plain, LoopCounter) and isinstance(fast_labelled, LoopCounter)
    for _ in range(3):
        fast_plain.inc()
        plain_ref.inc()
    fast_labelled.inc(2.5)
    labelled_ref.labels(t="x").inc(2.5)
    assert _scrape(ours) == _scrape(theirs)


def test_the_event_path_s_children_are_the_lock_free_ones() -> None:
    """The per-notification series of ``EventMetrics`` take the fast path (else it silently never runs)."""
    metrics = EventMetrics(CollectorRegistry())
    assert isinstance(loop_counter(metrics.events_received), LoopCounter)
    assert isinstance(loop_counter(metrics.notifications.labels(provider_type="generic")), LoopCounter)
    assert isinstance(loop_histogram(metrics.delivery_latency.labels(provider_type="generic")), LoopHistogram)
    assert isinstance(
        loop_histogram(metrics.delivery_duration.labels(provider_type="generic")), LoopHistogram
    )


def test_a_parent_with_labels_is_left_to_the_library() -> None:
    """A metric whose labels were not given has no cells: the library's own object (which raises) is kept."""
    registry = CollectorRegistry()
    counter = Counter("c", "c", ["t"], registry=registry)
    assert loop_counter(counter) is counter
    histogram = Histogram("h", "h", ["t"], registry=registry)
    assert loop_histogram(histogram) is histogram

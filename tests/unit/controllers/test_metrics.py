"""The compact reconcile histogram renders exactly what prometheus_client's Histogram would (reference §7)."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from notification_controller.controllers.manager import RECONCILE_BUCKETS
from notification_controller.controllers.metrics import CompactHistogram

NAME = "gotk_reconcile_duration_seconds"
DOC = "The duration in seconds of a GitOps Toolkit resource reconciliation."


def _samples(registry: CollectorRegistry) -> list[str]:
    """Exposition lines without the *_created timestamps (they differ by construction time)."""
    return sorted(line for line in generate_latest(registry).decode().splitlines() if "_created" not in line)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Alert", "Provider", "Receiver"]),
            st.sampled_from(["a", "b", "c"]),
            st.floats(min_value=0, max_value=4000, allow_nan=False),
        ),
        max_size=40,
    ),
    st.sets(st.sampled_from(["a", "b", "c"]), max_size=2),
)
def test_same_exposition_as_prometheus_histogram(
    observations: list[tuple[str, str, float]], removed: set[str]
) -> None:
    reference_registry, compact_registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram(
        NAME, DOC, ["kind", "name", "namespace"], buckets=RECONCILE_BUCKETS, registry=reference_registry
    )
    compact = CompactHistogram(NAME, DOC, RECONCILE_BUCKETS)
    compact_registry.register(compact)
    for kind, name, value in observations:
        reference.labels(kind, name, "ns").observe(value)
        compact.observe(kind, name, "ns", value)
    for kind, name, _ in observations:
        if name in removed:
            with contextlib.suppress(KeyError):
                reference.remove(kind, name, "ns")
            compact.remove(kind, name, "ns")
    assert _samples(compact_registry) == _samples(reference_registry)


def test_removal_forgets_the_object() -> None:
    compact = CompactHistogram(NAME, DOC, RECONCILE_BUCKETS)
    compact.observe("Alert", "a", "ns", 0.5)
    compact.remove("Alert", "a", "ns")
    assert len(compact) == 0

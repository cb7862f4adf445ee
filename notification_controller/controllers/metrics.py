"""``gotk_reconcile_duration_seconds{kind,name,namespace}`` stored compactly.

Flux exports one histogram per object. With prometheus_client's ``Histogram`` that is a child object with
13 locks and value cells per object: ~4 KB each, 39 MB for 10 000 objects (measured by ``make bench``).
This collector keeps, per object, one list of bucket counts and a sum, and renders the same series.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

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
            family.add_metric(list(key), buckets, self._sums[key])
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=["kind", "name", "namespace"])


def _format(bound: float) -> str:
    return repr(bound) if bound != int(bound) else f"{bound:.1f}"

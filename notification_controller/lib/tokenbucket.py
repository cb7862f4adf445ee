"""The one token bucket: ``rate`` tokens per second, at most ``burst`` saved (``golang.org/x/time/rate``).

Three parts of the controller throttle with it, each in its own way of waiting:

* the Kubernetes client (``kube/client.py``, client-go's ``flowcontrol``): ``Bucket.reserve`` takes a token
  now and says how long to wait for it; tokens may go negative, as ``rate.Limiter.Reserve``, so waiters are
  served in arrival order without a lock;
* the receiver server (per Receiver) and the Event recorder (per object, client-go's spam filter):
  ``KeyedBuckets.take`` refuses instead of waiting, and says when a token will be there.

``KeyedBuckets`` keeps one bucket per key in LRU order and forgets the least recently used past
``max_keys``: a forgotten key starts again with a full bucket, so the memory is bounded by the number of
keys, never by the traffic. Time is passed in (a monotonic reading), so the arithmetic is pure.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Bucket:
    """One bucket. ``rate <= 0`` disables it (every call is allowed at once)."""

    __slots__ = ("burst", "rate", "tokens", "updated")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.updated = now

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated)  # a clock that went back refills nothing
        self.tokens = min(float(self.burst), self.tokens + elapsed * self.rate)
        self.updated = now

    def reserve(self, now: float) -> float:
        """Take a token now; seconds until it is really there (0 when it is). Tokens may go negative."""
        if self.rate <= 0:
            return 0.0
        self._refill(now)
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def take(self, now: float) -> float | None:
        """Take a token if one is there (None); else take nothing and say in how many seconds one will be."""
        if self.rate <= 0:
            return None
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate


class KeyedBuckets(Generic[K]):
    """One ``Bucket`` per key, the ``max_keys`` most recently used kept."""

    def __init__(self, rate: float, burst: int, *, max_keys: int) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.max_keys = max_keys
        self._buckets: OrderedDict[K, Bucket] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: K, now: float) -> float | None:
        """``Bucket.take`` on ``key``'s bucket (a new key starts full)."""
        if self.rate <= 0:
            return None
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(self.rate, self.burst, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.take(now)

    def forget(self, key: K) -> None:
        self._buckets.pop(key, None)


def retry_after_header(wait: float) -> str:
    """Whole seconds, at least 1 (``Retry-After`` is an integer)."""
    return str(max(1, math.ceil(wait)))

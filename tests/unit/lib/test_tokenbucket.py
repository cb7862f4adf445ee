"""The one token bucket (``lib/tokenbucket.py``): ``golang.org/x/time/rate``'s arithmetic, on a time passed in."""

from __future__ import annotations

import pytest

from notification_controller.lib.tokenbucket import Bucket, KeyedBuckets, retry_after_header


def test_a_bucket_starts_full_then_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = Bucket(rate=2.0, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [None, None, None]
    assert bucket.take(100.0) == pytest.approx(0.5)  # one token comes back every 1/rate seconds
    assert bucket.take(100.5) is None
    assert bucket.take(1000.0) is None  # an idle hour saves at most ``burst``
    assert [bucket.take(1000.0) for _ in range(3)] == [None, None, pytest.approx(0.5)]


def test_reserve_goes_negative_so_waiters_queue_in_arrival_order() -> None:
    bucket = Bucket(rate=10.0, burst=1, now=0.0)
    assert [bucket.reserve(0.0) for _ in range(4)] == [
        0.0,
        pytest.approx(0.1),
        pytest.approx(0.2),
        pytest.approx(0.3),
    ]
    assert (
        bucket.reserve(1.0) == 0.0
    )  # the debt (-3 tokens) is paid after 0.3 s, then 1 s of refill, capped at 1


def test_a_clock_that_goes_back_refills_nothing_and_rate_zero_disables() -> None:
    bucket = Bucket(rate=1.0, burst=1, now=50.0)
    assert bucket.take(50.0) is None
    assert bucket.take(10.0) == pytest.approx(1.0)
    off = Bucket(rate=0.0, burst=1, now=0.0)
    assert {off.take(0.0) for _ in range(100)} == {None} and off.reserve(0.0) == 0.0


def test_keyed_buckets_are_independent_bounded_lru_and_forgettable() -> None:
    buckets: KeyedBuckets[str] = KeyedBuckets(1.0, 1, max_keys=2)
    assert buckets.take("a", 0.0) is None and buckets.take("a", 0.0) == pytest.approx(1.0)
    assert buckets.take("b", 0.0) is None  # b has its own bucket
    assert buckets.take("a", 0.0) is not None  # a touched again: most recently used
    assert buckets.take("c", 0.0) is None  # c evicts b, the least recently used
    assert len(buckets) == 2
    assert buckets.take("b", 0.0) is None, "an evicted key starts again full"
    buckets.forget("b")
    assert buckets.take("b", 0.0) is None


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    assert [retry_after_header(w) for w in (0.0, 0.2, 1.0, 1.01, 59.9)] == ["1", "1", "1", "2", "60"]

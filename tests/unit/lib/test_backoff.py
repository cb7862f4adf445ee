"""``lib.backoff``: retryablehttp's ``DefaultBackoff`` (``wait_min · 2ⁿ`` capped at ``wait_max``), the one formula."""

from __future__ import annotations

from notification_controller.lib.backoff import backoff


def test_doubles_from_the_minimum_up_to_the_cap() -> None:
    assert [backoff(n, 1.0, 30.0) for n in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff(0, 0.01, 0.05) == 0.01  # the conformance kit's FAST policy
    assert backoff(3, 0.01, 0.05) == 0.05


def test_a_huge_or_negative_attempt_stays_in_bounds() -> None:
    assert backoff(10**6, 1.0, 30.0) == 30.0  # no big-integer arithmetic, no overflow
    assert backoff(-1, 1.0, 30.0) == 1.0
    assert isinstance(backoff(2, 1, 30), float)

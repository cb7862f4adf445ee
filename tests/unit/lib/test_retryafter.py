"""``lib.retryafter.parse_retry_after``: RFC 9110 §10.2.3 delay-seconds or HTTP-date, None when unreadable."""

from __future__ import annotations

import pytest

from notification_controller.lib.retryafter import parse_retry_after

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("0", 0.0),
        ("-3", 0.0),  # the server asked for no wait
        ("Thu, 01 Jan 2026 00:00:30 GMT", 30.0),  # IMF-fixdate
        ("Thursday, 01-Jan-26 00:00:30 GMT", 30.0),  # RFC 850, obsolete but readable
        ("Thu, 01 Jan 2026 00:00:30", 30.0),  # no zone: UTC, as every HTTP-date
        ("Wed, 31 Dec 2025 23:59:00 GMT", 0.0),  # in the past: now
    ],
)
def test_readable_forms(value: str, seconds: float) -> None:
    assert parse_retry_after(value, now=NOW) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [None, "", "   ", "soon", "1_0", "nan", "inf", "-inf", "1e400"])
def test_unreadable_forms_are_none(value: str | None) -> None:
    assert parse_retry_after(value, now=NOW) is None

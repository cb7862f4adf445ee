"""``lib.clock``: Go's ``time.Time.String()`` shape."""

from __future__ import annotations

from datetime import UTC, datetime

from notification_controller.lib.clock import go_time_string


def test_go_time_string_shape() -> None:
    text = go_time_string(datetime(2026, 8, 7, 16, 12, 44, 123456, tzinfo=UTC), 42.000000001)
    assert text == "2026-08-07 16:12:44.123456000 +0000 UTC m=+42.000000001"

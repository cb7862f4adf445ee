"""``lib.duration``: Go durations (``time.ParseDuration``/``Duration.String``) and ISO-8601 durations."""

from __future__ import annotations

import pytest

from notification_controller.lib.duration import format_duration, parse_duration, parse_iso_or_go_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300), ("1h30m", 5400), ("750ms", 0.75), ("1.5s", 1.5), ("0", 0), ("10m0s", 600)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5d", "m5", "-1s", "1 h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_format_duration_like_go_and_iso_durations() -> None:
    assert format_duration(600) == "10m0s"
    assert format_duration(3600) == "1h0m0s"
    assert format_duration(0.75) == "750ms"
    assert format_duration(90) == "1m30s"
    assert parse_iso_or_go_duration("PT5S") == 5
    assert parse_iso_or_go_duration("PT1M30S") == 90
    assert parse_iso_or_go_duration("5s") == 5

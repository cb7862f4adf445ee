"""What the history shows of a delivery's request (``outbound.AttemptLog.summary``): the method, the address
masked as in logs, the body's size grouped by thousands, and how many more requests the delivery made."""

from __future__ import annotations

import pytest

from notification_controller.outbound import AttemptLog


def log(
    size: int, requests: int = 1, url: str = "https://hooks.slack.com/services/T0/B0/secret"
) -> AttemptLog:
    attempt = AttemptLog()
    attempt.method, attempt.url, attempt.size, attempt.requests = "POST", url, size, requests
    return attempt


@pytest.mark.parametrize(
    ("size", "shown"),
    [(0, "0"), (7, "7"), (999, "999"), (1000, "1,000"), (1234, "1,234"), (12_345_678, "12,345,678")],
)
def test_the_size_is_grouped_by_thousands(size: int, shown: str) -> None:
    assert log(size).summary() == f"POST https://hooks.slack.com/*** ({shown} B)"


def test_more_requests_are_counted_and_no_request_shows_nothing() -> None:
    assert log(10, requests=3).summary() == "POST https://hooks.slack.com/*** (10 B) (+2 more)"
    assert log(10, requests=0).summary() == ""
    assert "secret" not in log(5000, url="https://user:secret@example.com/x?token=secret").summary()

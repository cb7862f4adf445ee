"""``outbound.retry``: typed transport errors, described in the user's words (issue 16), classified without
looking at a class name (issue 24). The translation of real failures: ``test_transport.py``."""

from __future__ import annotations

import errno
import ssl

import pytest

from notification_controller.errors import FailureReason
from notification_controller.lib.backoff import backoff
from notification_controller.outbound.retry import classify_status, classify_transport
from notification_controller.outbound.transport import (
    ConnectError,
    TLSVerificationError,
    os_error_detail,
    tls_verification_detail,
)


def test_transport_errors_in_user_words() -> None:
    """Issue 16: Events say "connection refused", not "ConnectionRefusedError ... [Errno 111]"."""
    cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cert.verify_message = "self-signed certificate"
    expected = [
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "connection refused"),
        (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), "connection reset by peer"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "host unreachable"),
        (OSError(errno.EACCES, "Permission denied"), "permission denied"),
        (OSError("Multiple exceptions: [Errno 111] ..., [Errno 101] ..."), "cannot connect to host"),
    ]
    for raised, words in expected:
        assert os_error_detail(raised) == words
    assert tls_verification_detail(cert) == "TLS certificate verification failed: self-signed certificate"
    assert tls_verification_detail(None) == "TLS certificate verification failed"


@pytest.mark.parametrize(
    ("status", "retry", "failure"),
    [
        (400, False, FailureReason.CLIENT_ERROR),
        (404, False, FailureReason.CLIENT_ERROR),
        (429, True, FailureReason.RATE_LIMITED),
        (500, True, FailureReason.SERVER_ERROR),
        (501, False, FailureReason.SERVER_ERROR),
        (503, True, FailureReason.SERVER_ERROR),
        (0, True, FailureReason.SERVER_ERROR),
    ],
)
def test_status_verdicts(status: int, retry: bool, failure: FailureReason) -> None:
    verdict = classify_status(status, {"Retry-After": "7"})
    assert (verdict.retry, verdict.failure, verdict.reason) == (retry, failure, f"http_{status}")
    assert verdict.retry_after == (7.0 if status in (429, 503) else None)


def test_a_transport_error_carries_its_own_verdict() -> None:
    verdict = classify_transport(TLSVerificationError("x"))
    assert (verdict.retry, verdict.reason, verdict.failure) == (False, "tls_verification", FailureReason.TLS)
    verdict = classify_transport(ConnectError("connection refused"))
    assert (verdict.retry, verdict.reason, verdict.failure) == (True, "connection", FailureReason.CONNECTION)


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff(n, 2.0, 30.0) for n in range(6)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff(10_000, 2.0, 30.0) == 30.0  # no overflow on a huge attempt number

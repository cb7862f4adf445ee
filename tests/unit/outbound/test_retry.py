"""``outbound.retry`` and the proxied adapter's translation: aiohttp's exceptions become typed transport
errors, described in the user's words (issue 16), classified without looking at a class name (issue 24)."""

from __future__ import annotations

import errno
import ssl

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from notification_controller.errors import FailureReason
from notification_controller.lib.backoff import backoff
from notification_controller.outbound.proxied import translate
from notification_controller.outbound.retry import classify_status, classify_transport
from notification_controller.outbound.transport import (
    ConnectError,
    Disconnected,
    TLSVerificationError,
    TransportTimeout,
)


def test_transport_errors_in_user_words() -> None:
    """Issue 16: Events say "connection refused", not "ClientConnectorError ... ssl:default"."""
    key = ConnectionKey("h.example", 443, True, True, None, None, None)
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    reset = aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer")
    cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cert.verify_message = "self-signed certificate"
    expected = [
        (refused, ConnectError, "connection refused"),
        (reset, ConnectError, "connection reset by peer"),
        (TimeoutError(), TransportTimeout, "timed out"),
        (aiohttp.ServerDisconnectedError(), Disconnected, "server closed the connection"),
        (cert, TLSVerificationError, "TLS certificate verification failed: self-signed certificate"),
    ]
    for raised, kind, words in expected:
        error = translate(raised)
        assert type(error) is kind and error.detail == words
        assert type(raised).__name__ not in error.detail and "ssl:default" not in error.detail


def test_a_bug_is_not_disguised_as_a_transport_error() -> None:
    with pytest.raises(KeyError):
        translate(KeyError("x"))


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

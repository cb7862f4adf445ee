"""The retry decision, pure and separate from the loop (reference §4.0, retryablehttp's policy).

Retry on transport errors, on 429 and on status 0 or >= 500 except 501. Never retry other statuses,
redirect refusals, unsupported schemes, invalid headers or TLS verification failures. The reason string
labels the failure metric, so it is short and of low cardinality.
"""

from __future__ import annotations

import asyncio
import errno
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from ..errors import FailureReason
from .h1client import HostNotFound, InvalidResponse


@dataclass(frozen=True)
class Verdict:
    retry: bool
    reason: str
    retry_after: float | None = None


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds (integer seconds or an HTTP date); None if absent or unparsable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = (moment - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, delta)


def classify_status(status: int, headers: Mapping[str, str] | None = None) -> Verdict:
    if 200 <= status < 300:
        return Verdict(False, "ok")
    if status == 429 or status == 503:
        after = parse_retry_after((headers or {}).get("Retry-After"))
        return Verdict(True, f"http_{status}", after)
    if status == 0 or (status >= 500 and status != 501):
        return Verdict(True, f"http_{status}")
    return Verdict(False, f"http_{status}")


def classify_exception(exc: BaseException) -> Verdict:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return Verdict(False, "tls_verification")
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return Verdict(False, "tls_verification")
    name = type(exc).__name__
    if name in ("ClientConnectorCertificateError", "ServerFingerprintMismatch"):
        return Verdict(False, "tls_verification")
    if name in (
        "InvalidURL",
        "InvalidUrlClientError",
        "NonHttpUrlClientError",
        "InvalidUrlRedirectClientError",
    ):
        return Verdict(False, "invalid_url")
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return Verdict(True, "timeout")
    if name in ("ClientConnectorDNSError",) or isinstance(exc, HostNotFound):
        return Verdict(True, "dns")
    if response_problem(exc) is not None:  # retried, as Go's retryablehttp retries any transport error
        return Verdict(True, "invalid_response")
    if name in (
        "ClientConnectorError",
        "ClientOSError",
        "ServerDisconnectedError",
        "ClientProxyConnectionError",
    ):
        return Verdict(True, "connection")
    if isinstance(exc, ConnectionError | OSError):
        return Verdict(True, "connection")
    return Verdict(True, "transport")


_ERRNO_TEXT = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset by peer",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.ETIMEDOUT: "connection timed out",
    errno.EPIPE: "connection closed while sending",
}


def response_problem(exc: BaseException) -> str | None:
    """Why an answer could not be read, in the same words for both transports (issue 23 items 3 and 13):
    the direct client's ``InvalidResponse`` or aiohttp's parser refusing it (a ``ClientResponseError`` whose
    400 is aiohttp's own, not the server's status). None for any other exception."""
    if isinstance(exc, InvalidResponse):
        return exc.detail
    if type(exc).__name__ == "ClientResponseError":
        message = str(getattr(exc, "message", ""))
        if message.startswith("Too many headers"):
            return "too many header fields"
        if message.startswith("Got more than"):
            return "header field too long"
        return "malformed"
    return None


def describe_exception(exc: BaseException) -> str:
    """A transport failure in the user's words, for Events, status and logs: "connection refused", not
    ``ClientConnectorError: Cannot connect to host x:443 ssl:default [Connect call failed ...]``.

    Never includes the URL (the caller prints the redacted one) nor a Python class name.
    """
    verdict = classify_exception(exc)
    if verdict.reason == "tls_verification":
        detail = getattr(exc, "certificate_error", None) or exc.__cause__ or exc
        reason = getattr(detail, "verify_message", None) or getattr(detail, "reason", None)
        return f"TLS certificate verification failed{f': {reason}' if reason else ''}"
    if verdict.reason == "timeout":
        return "timed out"
    if verdict.reason == "dns":
        return "host not found (DNS lookup failed)"
    if verdict.reason == "invalid_url":
        return "invalid URL"
    problem = response_problem(exc)
    if problem is not None:
        return f"invalid response: {problem}"
    name = type(exc).__name__
    if name == "ServerDisconnectedError":
        return "server closed the connection"
    if name == "ClientProxyConnectionError":
        return "cannot connect to the proxy"
    os_error = getattr(exc, "os_error", None) or (exc if isinstance(exc, OSError) else None)
    if isinstance(os_error, OSError):
        if os_error.errno in _ERRNO_TEXT:
            return _ERRNO_TEXT[os_error.errno]
        if isinstance(os_error, ssl.SSLError):
            return f"TLS error: {os_error.reason or 'handshake failed'}"
        if os_error.strerror:
            return os_error.strerror.lower()
    if name in ("ClientPayloadError", "ContentLengthError", "TransferEncodingError"):
        return "the response was cut short"
    if isinstance(exc, ValueError):
        return "invalid request or response"
    return "transport error"


def backoff(attempt: int, wait_min: float, wait_max: float) -> float:
    """retryablehttp's DefaultBackoff: ``wait_min * 2**attempt`` capped at ``wait_max`` (attempt from 0)."""
    return float(min(wait_max, wait_min * (2**attempt)))


def failure_of(verdict: Verdict, status: int | None = None) -> FailureReason:
    """The class of a failure, from its verdict and the HTTP status when there was an answer."""
    if status is not None:
        if status == 429:
            return FailureReason.RATE_LIMITED
        if status >= 500 or status == 0:
            return FailureReason.SERVER_ERROR
        return FailureReason.CLIENT_ERROR
    reason = verdict.reason
    if reason == "invalid_response":  # the receiver answered something unreadable: its fault, as a 5xx
        return FailureReason.SERVER_ERROR
    if reason.startswith("tls"):
        return FailureReason.TLS
    if reason == "timeout":
        return FailureReason.TIMEOUT
    if reason.startswith("invalid") or reason in ("unsupported_scheme", "invalid_header"):
        return FailureReason.INVALID_REQUEST
    return FailureReason.CONNECTION if verdict.retry else FailureReason.OTHER

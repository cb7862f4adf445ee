"""The transport seam (issue 24 item 2): one protocol every HTTP client library sits behind, and the typed
errors it raises. httpx's ``AsyncBaseTransport`` is the model: ``OutboundHTTP`` (``client.py``) owns the
headers, redirects, status classification, retries and masking; a ``Transport`` sends ONE exchange and
either returns the answer or raises a ``TransportError`` subclass. The adapter translates its own libraries'
exceptions inside itself (``h1client.H1Client``: asyncio, ssl, socket, python_socks; aiohttp's adapter went
with aiohttp's outbound use, issue 24), so no library exception leaves it and nothing above is ever told apart
by a class name (``outbound/retry.py`` used to match ``"ClientConnectorError"`` and friends as strings).

Each error class carries its ``FailureReason`` (the failure metric's class and what callers decide on),
whether a retry may help, the short ``reason`` string that labels ``notification_delivery_failed_total``
(kept as it was: ``connection``, ``dns``, ``tls_verification``...) and ``detail``: the failure in the
user's words ("connection refused"), never a URL, a server's bytes or a Python class name.
"""

from __future__ import annotations

import errno
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

from ..errors import FailureReason
from .request import OutboundResponse


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request as a transport sends it: headers already checked (``request.wire_headers``) and merged,
    the URL absolute (after any redirect), the proxy resolved (None: direct)."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    tls: ssl.SSLContext | None
    body_limit: int
    proxy: str | None = None


class Transport(Protocol):
    """Sends one exchange; raises ``TransportError`` (and only that, or ``CancelledError``)."""

    async def send(self, exchange: Exchange) -> OutboundResponse: ...

    async def close(self) -> None: ...


class TransportError(Exception):
    """A request that got no usable answer. ``detail`` is shown to users (Events, status, logs)."""

    failure: ClassVar[FailureReason] = FailureReason.CONNECTION
    reason: ClassVar[str] = "connection"
    retryable: bool = True  # the class's default; ``ProxyError`` sets it per instance

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ConnectError(TransportError):
    """No connection to the origin: refused, unreachable, reset before an answer, connect timed out."""


class DNSError(ConnectError):
    """The host name did not resolve."""

    failure = FailureReason.DNS
    reason = "dns"

    def __init__(self, detail: str = "host not found (DNS lookup failed)") -> None:
        super().__init__(detail)


class ProxyError(TransportError):
    """The proxy refused to open the tunnel. A SOCKS refusal (bad credentials, target not allowed) is not
    retried; an HTTP proxy's CONNECT refusal is, as before (Go's retryablehttp retries any transport error):
    ``retryable`` is per instance."""

    failure = FailureReason.PROXY
    reason = "proxy"

    def __init__(self, detail: str, *, retryable: bool = False) -> None:
        super().__init__(detail)
        self.retryable = retryable


class ProxyUnreachable(ProxyError):
    """No connection to the proxy itself: retried, and labelled ``connection`` as before."""

    reason = "connection"

    def __init__(self, detail: str = "cannot connect to the proxy") -> None:
        super().__init__(detail, retryable=True)


class TLSError(TransportError):
    """The TLS handshake failed for another reason than the certificate (protocol, alert): retried."""

    failure = FailureReason.TLS
    reason = "connection"  # the metric label a failed handshake always had


class TLSVerificationError(TLSError):
    """The server's certificate is not trusted or not for this host: never retried."""

    reason = "tls_verification"
    retryable = False


class TransportTimeout(TransportError):
    """A transport's own timer ran out (connect). The delivery's budget is ``OutboundHTTP``'s, not this."""

    failure = FailureReason.TIMEOUT
    reason = "timeout"

    def __init__(self, detail: str = "timed out") -> None:
        super().__init__(detail)


class Disconnected(TransportError):
    """The server closed (or reset) the connection before a complete answer head."""

    def __init__(self, detail: str = "server closed the connection") -> None:
        super().__init__(detail)


class InvalidResponse(TransportError):
    """An answer that is not HTTP/1.1 we can read (malformed, too many or too long header fields): the
    receiver's fault, as a 5xx is, and retried as Go's retryablehttp retries any transport error."""

    failure = FailureReason.SERVER_ERROR
    reason = "invalid_response"

    def __init__(self, problem: str) -> None:
        super().__init__(f"invalid response: {problem}")
        self.problem = problem


class InvalidRequest(TransportError):
    """A request this transport cannot send (a URL it cannot parse, a line break in a header): never retried."""

    failure = FailureReason.INVALID_REQUEST
    reason = "invalid_url"
    retryable = False


class InvalidHeader(InvalidRequest):
    """A header this transport cannot write (a line break or a character outside its charset)."""

    reason = "invalid_header"


def tls_verification_detail(error: ssl.SSLCertVerificationError | None) -> str:
    reason = None if error is None else (error.verify_message or error.reason)
    return f"TLS certificate verification failed{f': {reason}' if reason else ''}"


_ERRNO_TEXT = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset by peer",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.ETIMEDOUT: "connection timed out",
    errno.EPIPE: "connection closed while sending",
}


def os_error_detail(error: OSError) -> str:
    """An ``OSError`` from connecting or sending, in the user's words ("connection refused")."""
    if error.errno in _ERRNO_TEXT:
        return _ERRNO_TEXT[error.errno]
    if error.strerror:
        return error.strerror.lower()
    # asyncio's "Multiple exceptions" (every address of a dual-stack host failed, differently)
    return "cannot connect to host"

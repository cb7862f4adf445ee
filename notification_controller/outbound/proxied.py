"""The ``Transport`` for proxied requests (HTTP CONNECT, SOCKS, the environment's proxy) and for what the
direct client does not send (a URL with credentials in it, a scheme other than http/https, HEAD...): an
``aiohttp.ClientSession``, plus one pooled session per SOCKS proxy (aiohttp_socks works at the connector).

aiohttp's and aiohttp_socks' exceptions are translated here into ``transport.TransportError`` classes, by
``isinstance`` on the libraries' own classes (never by class-name strings); nothing above this module
imports aiohttp for outbound requests. ``aiohttp_socks`` is imported with the first SOCKS proxy: most
processes never use one.

Why aiohttp is still here (issue 24 item 2 asks for ONE client): see the decision in ``client.py``.
"""

from __future__ import annotations

import io
import ssl
from collections import OrderedDict

import aiohttp

from .h1client import MAX_FIELD, MAX_HEADERS
from .request import OutboundResponse
from .transport import (
    ConnectError,
    Disconnected,
    DNSError,
    Exchange,
    InvalidRequest,
    InvalidResponse,
    ProxyError,
    ProxyUnreachable,
    TLSError,
    TLSVerificationError,
    TransportError,
    TransportTimeout,
    os_error_detail,
    tls_verification_detail,
)

MAX_SOCKS_SESSIONS = 32
SOCKS_SCHEMES = ("socks5://", "socks5h://", "socks4://")


class AiohttpTransport:
    """aiohttp behind the ``Transport`` protocol."""

    def __init__(self, *, user_agent: str = "notification-controller") -> None:
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._socks_sessions: OrderedDict[str, aiohttp.ClientSession] = OrderedDict()
        # aiohttp_socks' error classes once a SOCKS session exists (only its connector raises them): () before
        self._socks_refused: tuple[type[Exception], ...] = ()
        self._socks_unreachable: tuple[type[Exception], ...] = ()

    def _new_session(self, connector: aiohttp.BaseConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            headers={"User-Agent": self._user_agent},
            # trust_env would read netrc and the proxy environment in a thread for every request
            # (a fifth of the dispatch CPU): ``OutboundHTTP`` resolves the environment proxies once instead.
            trust_env=False,
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding",),  # bodies are not decompressed: do not ask for gzip
            # the answer's head: aiohttp's defaults, written down so both transports keep one limit
            max_line_size=MAX_FIELD,
            max_field_size=MAX_FIELD,
            max_headers=MAX_HEADERS,
            # No cookie jar, as Flux's Go client (``Jar`` nil): a cookie one Provider's endpoint sets is
            # never sent with another's request through this shared session (issue 17).
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self._new_session(
                aiohttp.TCPConnector(limit=512, limit_per_host=64, ttl_dns_cache=30)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        while self._socks_sessions:
            _, session = self._socks_sessions.popitem()
            await session.close()

    async def _session_for(self, proxy: str | None) -> tuple[aiohttp.ClientSession, str | None]:
        """The session and the per-request proxy for ``proxy`` (http/https per request, socks per session)."""
        if proxy is None or not proxy.startswith(SOCKS_SCHEMES):
            return self.session, proxy
        session = self._socks_sessions.get(proxy)
        if session is None:
            from aiohttp_socks import (  # with the first SOCKS proxy
                ProxyConnectionError,
                ProxyConnector,
                ProxyTimeoutError,
            )
            from aiohttp_socks import ProxyError as SocksRefused

            self._socks_refused = (SocksRefused,)
            self._socks_unreachable = (ProxyConnectionError, ProxyTimeoutError)
            session = self._new_session(ProxyConnector.from_url(proxy, limit=64, rdns=True))
            self._socks_sessions[proxy] = session
            if len(self._socks_sessions) > MAX_SOCKS_SESSIONS:
                _, oldest = self._socks_sessions.popitem(last=False)
                await oldest.close()
        else:
            self._socks_sessions.move_to_end(proxy)
        return session, None

    async def send(self, exchange: Exchange) -> OutboundResponse:
        try:
            session, proxy = await self._session_for(exchange.proxy)
            async with session.request(
                exchange.method,
                exchange.url,
                proxy=proxy,
                data=_payload(exchange.body),
                headers=exchange.headers,
                ssl=exchange.tls if exchange.tls is not None else True,
                allow_redirects=False,
            ) as resp:
                body = await resp.content.read(exchange.body_limit)
                return OutboundResponse(resp.status, dict(resp.headers), body)
        except Exception as exc:
            if isinstance(exc, self._socks_refused):
                # the SOCKS proxy refused (bad credentials, target not allowed): not transient
                raise ProxyError(f"SOCKS proxy error: {exc}") from None
            if isinstance(exc, self._socks_unreachable):
                raise ProxyUnreachable() from None
            raise translate(exc) from None


def translate(exc: Exception) -> TransportError:
    """aiohttp's (and the standard library's) exception as the transport error it is. The order matters:
    aiohttp's classes inherit from several of the standard ones (a certificate error is an ``OSError`` and a
    ``ValueError`` too)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error = exc.certificate_error
        return TLSVerificationError(
            tls_verification_detail(error if isinstance(error, ssl.SSLCertVerificationError) else None)
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TLSVerificationError(tls_verification_detail(exc))
    if isinstance(exc, aiohttp.ServerFingerprintMismatch):
        return TLSVerificationError("TLS certificate verification failed: fingerprint mismatch")
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return DNSError()
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return ProxyUnreachable()
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return ProxyError(f"the proxy refused the tunnel ({exc.status})", retryable=True)
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        cause = getattr(exc, "os_error", None) or exc
        reason = getattr(cause, "reason", None)
        return TLSError(f"TLS error: {reason or 'handshake failed'}")
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return InvalidRequest("invalid URL")
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError (sock_connect) is one
        return TransportTimeout()
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return Disconnected()
    if isinstance(exc, aiohttp.ClientPayloadError):
        return Disconnected("the response was cut short")
    if isinstance(exc, aiohttp.ClientResponseError):
        # aiohttp's parser refused the answer (its own 400, not the server's status); its message is the
        # only place it says why (issue 23 item 3: the same words as the direct client's)
        message = str(exc.message)
        if message.startswith("Too many headers"):
            return InvalidResponse("too many header fields")
        if message.startswith("Got more than"):
            return InvalidResponse("header field too long")
        return InvalidResponse("malformed")
    if isinstance(exc, aiohttp.ClientOSError):
        return ConnectError(os_error_detail(exc))
    if isinstance(exc, OSError):
        return ConnectError(os_error_detail(exc))
    if isinstance(exc, ValueError):
        return InvalidRequest("invalid request")
    if isinstance(exc, aiohttp.ClientError):
        return ConnectError("transport error")
    raise exc  # not a transport failure: a bug, which must not be disguised as one


def _payload(body: bytes) -> bytes | io.BytesIO | None:
    """Bodies over 1 MiB (a 1 MiB event message) go as a stream: aiohttp warns that raw bytes that large
    may block the loop. A fresh stream per request, so retries and redirects resend the whole body."""
    if not body:
        return None
    return io.BytesIO(body) if len(body) > 1 << 20 else body

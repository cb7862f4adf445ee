"""THE outbound HTTP/1.1 client, on ``httptools`` (llhttp), with a keep-alive pool: direct requests, HTTP
CONNECT tunnels, plain http through an HTTP proxy (absolute form) and SOCKS 4/5 (``python_socks``).

Why home-made (issue 17, decided again in issue 24 item 2; the decision is in ``client.py``'s docstring): a
delivered notification is one POST, and aiohttp's client cost ~115-165 µs of CPU per POST on the bench
machine against ~36-40 µs here (16 concurrent requests to a local sink, ``bench/``), after hardening this
client to aiohttp's and Go's strictness with the same adversarial battery run against both
(``tests/adversarial/test_transport_parity.py``). What it leans on: llhttp's callbacks through httptools
(``tests/unit/test_dependency_internals.py``) and python_socks' ``Proxy.connect`` returning a connected
socket (``tests/integration/test_socks_proxy.py`` fails when that changes).

What it does:

* writes the request head and body in one ``write`` (``Host``, ``Content-Length`` and the caller's headers;
  nothing else: no ``Accept-Encoding``, no cookies, as Go's client without a jar);
* reads the response with llhttp: status, headers, a body capped at ``body_limit`` bytes (the rest is not
  read and the connection is closed), ``1xx`` interim answers skipped, a body delimited by the connection's
  end completed at EOF;
* bounds the response head as aiohttp's client does (issue 23 item 3; measured against aiohttp 3.14, whose
  parser refused each of these at once while this client spent 10 s of CPU or 2.67 GB on them): at most
  ``MAX_HEADERS`` (128) fields per answer, ``MAX_FIELD`` (8190) bytes per field, and ``MAX_HEAD`` (1 MiB,
  Go's order of magnitude, about 128 × 8190) for all the heads of one exchange, interim answers included,
  counted as the bytes arrive (llhttp's binding concatenates a field's pieces, so an unbounded field would
  cost quadratic copies). A repeated field keeps its first value, as Go's ``Header.Get`` and the proxied
  path's ``dict(resp.headers)`` do: nothing is joined;
* an answer whose head arrived is returned even when the connection then ends before its body did (what
  the proxied path's ``content.read`` does): a 200 cut by a reset was delivered, so it is not sent again;
* keeps connections per origin (scheme, host, port, TLS context) for reuse only when the server agrees
  (``Connection: close``, HTTP/1.0, ``Keep-Alive: timeout=N``), the request was fully written before the
  answer began, exactly one complete answer came with nothing after it, and an error answer did not leave a
  request body the server may not have read (issue 23 item 14: an early 413 for a 3 MiB body had the next
  request arrive behind the rest of the old body); an idle connection is closed after ``idle_timeout``
  seconds by a timer (not only when next looked at: issue 23 item 11), at most ``MAX_IDLE_PER_ORIGIN`` per
  origin and ``MAX_IDLE`` in all are kept; a connection the server closed is never reused; an idempotent
  request that finds a pooled connection closed before any answer is sent again once on a new connection
  (RFC 9112 §9.3.1, as aiohttp does);
* TLS with the caller's context or the default one (certificate and host name verified), happy eyeballs on
  dual-stack hosts, a connect timeout covering the proxy's part too;
* proxies as Go's ``http.Transport`` uses them: an https URL through an HTTP proxy is a ``CONNECT host:port``
  tunnel (any answer but 200 is a ``ProxyError``; bytes after the 200 are refused), then TLS to the origin
  inside it with the Provider's context (``loop.start_tls``); an http URL goes to the proxy in the absolute
  form (``POST http://host/path``); ``Proxy-Authorization: Basic`` from the proxy URL's userinfo either way;
  ``socks5``/``socks5h``/``socks4`` URLs open the tunnel socket with python_socks (the proxy resolves the
  name), handed to ``loop.create_connection(sock=...)``. The pool key holds the proxy URL: a tunnelled or
  proxied connection is never lent to another origin or another proxy;
* credentials in the URL (``https://user:pass@host``) become ``Authorization: Basic`` unless the request has
  one (Go's rule).

Errors: every failure leaves ``send`` as a ``transport.TransportError`` class (asyncio, ``ssl``, ``socket``
and python_socks exceptions are translated here and nowhere else).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import socket
import ssl
import time
from collections import deque
from collections.abc import Mapping
from types import MappingProxyType

import httptools
from multidict import CIMultiDictProxy
from yarl import URL

from .request import (
    FRAMING,  # the URL's host and the body's length are this client's, never a caller's
    OutboundResponse,
)
from .transport import (
    ConnectError,
    Disconnected,
    DNSError,
    Exchange,
    InvalidHeader,
    InvalidRequest,
    InvalidResponse,
    ProxyError,
    ProxyUnreachable,
    TLSError,
    TLSVerificationError,
    TransportTimeout,
    os_error_detail,
    tls_verification_detail,
)

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})  # HEAD's answer has no body: aiohttp's
# Idle connections: aiohttp's keep-alive timeout (15 s: the proxied path's, so both paths hold a socket as
# long; shorter than Go's 90 s because a server closing first is the race that costs a failed request), its
# per-host limit (64), and Go's MaxIdleConns (100, Flux's transport) in all.
IDLE_TIMEOUT = 15.0
MAX_IDLE_PER_ORIGIN = 64
MAX_IDLE = 100
# The answer's head, as aiohttp's client parser bounds it (max_headers, max_field_size / max_line_size).
MAX_HEADERS = 128
MAX_FIELD = 8190
MAX_HEAD = 1 << 20


# scheme, host, port, the TLS context itself (not its id: a pooled connection verified under one context
# is never lent to a request that asked for another, even after the first was freed) and the proxy URL ("" for
# none; credentials included): a tunnelled or proxied connection is never lent to another origin or proxy
Origin = tuple[str, str, int, ssl.SSLContext | None, str]
SOCKS_SCHEMES = ("socks5", "socks5h", "socks4")


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; one request at a time."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.keep_alive_for: float | None = None  # the server's Keep-Alive: timeout, if it sent one
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[tuple[int, dict[str, str], bytes]] | None = None
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._limit = 0
        self._received = False  # any byte of the current answer
        self._head_done = False
        self._reusable = False
        self._head_bytes = 0  # bytes of this exchange received before its final head was complete
        self._field_bytes = 0  # of those, bytes since the last complete header field
        self._fields = 0  # header fields of the current answer
        self._violation: InvalidResponse | None = None  # a head limit a callback found exceeded
        self._answered = False  # the exchange's final answer is complete: any further byte is left over
        self._early = False  # the answer began before the request was fully handed to the kernel
        self._body_sent = False  # the request carried a body

    # ---- asyncio.Protocol --------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self._received:
            self._received = True
            transport = self.transport
            if transport is not None and transport.get_write_buffer_size():
                self._early = True  # answered before the request was written: the server is out of step
        if self._waiter is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.abort()
            return
        head = not self._head_done
        if head:
            self._head_bytes += len(data)
            self._field_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            error = self._violation or InvalidResponse(f"malformed ({exc})")
            self._finish_error(error)
            self.abort()
            return
        if head and not self._head_done:
            if self._head_bytes > MAX_HEAD:
                self._refuse(InvalidResponse("header section too large"))
            elif self._field_bytes > MAX_FIELD:
                self._refuse(InvalidResponse("header field too long"))

    def _refuse(self, error: InvalidResponse) -> None:
        self._finish_error(error)
        self.abort()

    def eof_received(self) -> bool | None:
        self._on_end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.transport = None
        self._on_end(exc)

    def _on_end(self, exc: Exception | None = None) -> None:
        self.closed = True
        if self._waiter is None or self._waiter.done():
            return
        if self._head_done:
            # a body delimited by the end of the connection, or one cut short: the answer came (its status
            # says what the server did), so it is returned as the proxied path's read returns it, not resent
            self._complete(reusable=False)
            return
        error = Disconnected()
        if exc is not None:
            error.__cause__ = exc
        self._finish_error(error)

    # ---- llhttp callbacks --------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._answered:  # a second answer to one request: whatever it is, the connection is not reused
            self._reusable = False
            self.abort()
        self._headers = {}
        self._body = []
        self._size = 0
        self._head_done = False
        self._fields = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > MAX_HEADERS:
            self._violation = InvalidResponse("too many header fields")
            raise self._violation
        if len(name) + len(value) > MAX_FIELD:
            self._violation = InvalidResponse("header field too long")
            raise self._violation
        self._field_bytes = 0
        key = name.decode("latin-1")
        if key not in self._headers:  # the first value, as Go's Header.Get and dict(aiohttp's headers)
            self._headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._head_done = self._status >= 200
        self._field_bytes = 0

    def on_body(self, body: bytes) -> None:
        if self._size >= self._limit:
            return
        self._size += len(body)
        self._body.append(body)
        if self._size >= self._limit:  # enough: the rest is not read, the connection is not reused
            self._complete(reusable=False)
            self.abort()

    def on_message_complete(self) -> None:
        if self._status < 200:  # 100 Continue, 103 Early Hints: the answer follows
            return
        self._answered = True
        self._complete(reusable=self._parser.should_keep_alive())

    # ---- one exchange ------------------------------------------------------------------------------------
    async def exchange(
        self, data: tuple[bytes, ...], limit: int, *, has_body: bool = False
    ) -> tuple[int, dict[str, str], bytes]:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, dict[str, str], bytes]] = loop.create_future()
        self._waiter = waiter
        self._limit = limit
        self._received = False
        self._reusable = False
        self._head_done = False
        self._head_bytes = 0
        self._field_bytes = 0
        self._answered = False
        self._early = False
        self._body_sent = has_body
        assert self.transport is not None
        self.transport.writelines(data)
        return await waiter

    @property
    def answered_nothing(self) -> bool:
        return not self._received

    @property
    def reusable(self) -> bool:
        return self._reusable and not self.closed

    def _complete(self, *, reusable: bool) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        body = b"".join(self._body)
        if len(body) > self._limit:
            body = body[: self._limit]
        self._body = []
        # An answer that came before the whole request was sent (an early 4xx) leaves the server out of step;
        # so may an error answer to a request with a body that the kernel took but the server never read.
        transport = self.transport
        reusable = (
            reusable
            and not self._early
            and not (self._body_sent and self._status >= 400)
            and transport is not None
            and transport.get_write_buffer_size() == 0
        )
        self._reusable = reusable
        if reusable:
            self.keep_alive_for = _keep_alive_timeout(self._headers)
        waiter.set_result((self._status, self._headers, body))

    def _finish_error(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


Headers = tuple[tuple[str, str], ...] | list[tuple[str, str]]
_SHARED = (CIMultiDictProxy, MappingProxyType)  # read-only mappings (``request.shared_headers``)
_SHARED_ENTRIES = 256  # Providers whose merged headers and heads are kept (then all are forgotten)


@functools.lru_cache(maxsize=256)  # the same few Provider addresses, every delivery
def direct_target(url: str) -> tuple[str, str, int, str, str] | None:
    """(scheme, host, port, path and query, "user:password" decoded or "") as aiohttp sent them (yarl's
    encoding), or None when no HTTP request can go to the URL: not http(s), no host."""
    try:
        parsed = URL(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return None
    host = parsed.raw_host
    if parsed.scheme not in ("http", "https") or not host:
        return None
    userinfo = ""
    if parsed.user is not None or parsed.password is not None:
        userinfo = f"{parsed.user or ''}:{parsed.password or ''}"
    return parsed.scheme, host, port, parsed.raw_path_qs or "/", userinfo


def basic_credentials(userinfo: str) -> str:
    """``Basic base64(user:password)`` (UTF-8, as Go's ``SetBasicAuth`` writes a string's bytes)."""
    return "Basic " + base64.b64encode(userinfo.encode("utf-8", errors="surrogateescape")).decode("ascii")


@functools.lru_cache(maxsize=64)
def proxy_credentials(proxy: str) -> str:
    """The ``Proxy-Authorization`` value for a proxy URL's userinfo ("" without one), as Go's transport and
    aiohttp build it from ``http://user:pass@proxy:3128``."""
    parsed = URL(proxy)
    if parsed.user is None and parsed.password is None:
        return ""
    return basic_credentials(f"{parsed.user or ''}:{parsed.password or ''}")


def _keep_alive_timeout(headers: dict[str, str]) -> float | None:
    for name, value in headers.items():
        if name.lower() == "keep-alive":
            for part in value.split(","):
                key, _, number = part.strip().partition("=")
                if key.strip().lower() == "timeout":
                    try:
                        return max(
                            0.0, float(number.strip()) - 1.0
                        )  # a second early: no race with the server
                    except ValueError:
                        return None
    return None


class _ConnectOpening(asyncio.Protocol):
    """Reads the proxy's answer to CONNECT (bounded like any head): 200 and nothing after it, or an error."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def established(self) -> None:
        await self._answer

    def data_received(self, data: bytes) -> None:
        if self._answer.done():
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                self._answer.set_exception(ProxyError("the proxy's answer to CONNECT is too large"))
            return
        line = bytes(self._buffer[: self._buffer.find(b"\r\n")])
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            self._answer.set_exception(
                ProxyError("the proxy's answer to CONNECT is not HTTP", retryable=True)
            )
        elif int(parts[1]) != 200:
            status = int(parts[1])
            self._answer.set_exception(ProxyError(f"the proxy refused the tunnel ({status})", retryable=True))
        elif end + 4 != len(self._buffer):  # the origin speaks first only after our TLS hello
            self._answer.set_exception(ProxyError("the proxy sent bytes after its answer to CONNECT"))
        else:
            self._answer.set_result(None)

    def eof_received(self) -> bool | None:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._answer.done():
            error = ProxyError("the proxy closed the connection during CONNECT", retryable=True)
            self._answer.set_exception(error)


@functools.lru_cache(maxsize=64)
def _proxy_address(proxy: str) -> tuple[str, int, ssl.SSLContext | None]:
    """(host, port, TLS context or None) of an http:// or https:// proxy URL."""
    parsed = URL(proxy)
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise InvalidRequest("unsupported proxy URL")
    tls = ssl.create_default_context() if parsed.scheme == "https" else None
    return parsed.raw_host.strip("[]"), parsed.port or (443 if tls else 80), tls


async def socks_tunnel(proxy: str, host: str, port: int) -> socket.socket:
    """A socket connected to ``host:port`` through a SOCKS proxy (python_socks' asyncio API, as aiohttp_socks
    used it; the proxy resolves the name: socks5h and socks5 alike, as Go's dialer). Imported with the first
    SOCKS proxy: most processes never use one."""
    from python_socks import ProxyConnectionError, ProxyTimeoutError
    from python_socks import ProxyError as SocksRefused
    from python_socks.async_.asyncio import Proxy

    url = "socks5" + proxy[len("socks5h") :] if proxy.startswith("socks5h") else proxy
    try:
        tunnel = Proxy.from_url(url, rdns=True)
    except ValueError:
        raise InvalidRequest("unsupported proxy URL") from None
    try:
        return await tunnel.connect(host, port)
    except SocksRefused as exc:  # bad credentials, target not allowed: not transient
        raise ProxyError(f"SOCKS proxy error: {exc}") from None
    except (ProxyConnectionError, ProxyTimeoutError):
        raise ProxyUnreachable() from None


class H1Client:
    """Direct HTTP/1.1 requests with a keep-alive pool: the ``Transport`` for every request without a proxy.
    ``close`` closes every pooled connection."""

    def __init__(
        self,
        *,
        user_agent: str = "notification-controller",
        idle_timeout: float = IDLE_TIMEOUT,
        connect_timeout: float = 30.0,
        max_idle: int = MAX_IDLE,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
    ) -> None:
        self.user_agent = user_agent
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self.max_idle_per_origin = max_idle_per_origin
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._idle_count = 0  # connections in the deques of ``_idle`` (closed ones included until swept)
        self._reaper: asyncio.TimerHandle | None = None
        self._default_tls: ssl.SSLContext | None = None
        self._head_cache: dict[tuple[str, str, int], str] = {}
        # a Provider's shared headers (``request.shared_headers``: read-only, one object per notifier) merged
        # and encoded once, not per request (issue 29: ``_headers`` + ``_encode`` were ~3% of a delivery's CPU):
        # by the identity of the mapping (kept in the entry, so the id is not reused) and of the merged tuple
        self._merged: dict[tuple[int, bool, str], tuple[Mapping[str, str], Headers]] = {}
        self._heads: dict[tuple[int, str, str, int, str, str, str], tuple[Headers, str]] = {}

    def default_tls(self) -> ssl.SSLContext:
        if self._default_tls is None:
            self._default_tls = ssl.create_default_context()  # SSL_CERT_FILE/SSL_CERT_DIR honoured
        return self._default_tls

    # ---- the Transport protocol -----------------------------------------------------------------------
    async def send(self, exchange: Exchange) -> OutboundResponse:
        """One exchange; every failure is a ``transport.TransportError`` (asyncio, ``ssl`` and ``socket``
        exceptions are translated here and nowhere else)."""
        target = direct_target(exchange.url)
        if target is None:
            raise InvalidRequest("invalid URL")
        scheme, host, port, path, userinfo = target
        if exchange.method not in METHODS:
            raise InvalidRequest(f"unsupported method {exchange.method}")
        headers = self._headers(exchange.headers, exchange.body, userinfo)
        try:
            status, answer_headers, body = await self.request(
                exchange.method,
                scheme,
                host,
                port,
                path,
                headers,
                exchange.body,
                tls=exchange.tls,
                body_limit=exchange.body_limit,
                proxy=exchange.proxy or "",
            )
        except (ProxyError, InvalidRequest):
            raise
        except (Disconnected, ConnectionResetError, BrokenPipeError) as exc:
            if isinstance(exc, Disconnected):
                raise
            raise Disconnected(os_error_detail(exc)) from None
        except ssl.SSLCertVerificationError as exc:
            raise TLSVerificationError(tls_verification_detail(exc)) from None
        except ssl.SSLError as exc:
            raise TLSError(f"TLS error: {exc.reason or 'handshake failed'}") from None
        except TimeoutError:
            raise TransportTimeout() from None
        except OSError as exc:
            raise ConnectError(os_error_detail(exc)) from None
        except UnicodeEncodeError:  # a header value request.wire_headers would have refused
            raise InvalidHeader("invalid request header") from None
        return OutboundResponse(status, answer_headers, body)

    def _headers(self, headers: Mapping[str, str], body: bytes, userinfo: str = "") -> Headers:
        """``_merge``, once per shared header mapping (see ``__init__``)."""
        if type(headers) not in _SHARED:
            return self._merge(headers, body, userinfo)
        key = (id(headers), bool(body), userinfo)
        hit = self._merged.get(key)
        if hit is not None and hit[0] is headers:
            return hit[1]
        if len(self._merged) >= _SHARED_ENTRIES:
            self._merged.clear()
        merged = tuple(self._merge(headers, body, userinfo))
        self._merged[key] = (headers, merged)
        return merged

    def _merge(self, headers: Mapping[str, str], body: bytes, userinfo: str = "") -> list[tuple[str, str]]:
        """The request's headers, one per name (a Secret's ``content-type`` overrides the Provider's
        ``Content-Type``), plus what aiohttp's session adds that a receiver may look at: the User-Agent,
        ``Accept: */*``, a Content-Type for a body without one (``application/octet-stream``). No
        ``Accept-Encoding``: the body is not decompressed (a compressed error text would be unreadable)."""
        out: list[tuple[str, str]] = []
        names: dict[str, int] = {}
        for name, value in headers.items():
            # one line per name, the last value winning, as aiohttp's multidict and Go's Header.Set make it
            lower = name.lower()
            at = names.get(lower)
            if at is None:
                names[lower] = len(out)
                out.append((name, value))
            else:
                out[at] = (name, value)
        if userinfo and "authorization" not in names:  # Go's rule: the URL's userinfo unless a header says
            out.append(("Authorization", basic_credentials(userinfo)))
        if "user-agent" not in names:
            out.insert(0, ("User-Agent", self.user_agent))
        if "accept" not in names:
            out.append(("Accept", "*/*"))
        if body and "content-type" not in names:
            out.append(("Content-Type", "application/octet-stream"))
        return out

    async def request(
        self,
        method: str,
        scheme: str,
        host: str,
        port: int,
        target: str,
        headers: dict[str, str] | Headers,
        body: bytes,
        *,
        tls: ssl.SSLContext | None = None,
        body_limit: int,
        proxy: str = "",
    ) -> tuple[int, dict[str, str], bytes]:
        """One exchange: (status, headers, body ≤ ``body_limit`` bytes). ``target`` is the path and query;
        ``proxy`` an http:// or socks URL ("": direct)."""
        context = (tls or self.default_tls()) if scheme == "https" else None
        origin: Origin = (scheme, host, port, context, proxy)
        absolute = ""
        if proxy and scheme == "http" and not proxy.startswith(SOCKS_SCHEMES):
            # plain http through an HTTP proxy: the absolute form to the proxy, as Go and aiohttp send it
            absolute = "http://"
            credentials = proxy_credentials(proxy)
            if credentials:
                items = headers.items() if isinstance(headers, dict) else headers
                headers = [*items, ("Proxy-Authorization", credentials)]
        data = self._encode(method, host, port, scheme, target, headers, body, absolute)
        has_body = bool(body)
        connection = self._pooled(origin)
        if connection is not None:
            try:
                return await self._exchange(connection, data, body_limit, has_body)
            except (Disconnected, ConnectionResetError, BrokenPipeError):
                # a kept connection the server had closed: send again on a new one if the method allows
                if not (connection.answered_nothing and method in IDEMPOTENT):
                    raise
        connection = await self._connect(origin, context)
        return await self._exchange(connection, data, body_limit, has_body)

    async def _exchange(
        self, connection: _Connection, data: tuple[bytes, ...], limit: int, has_body: bool
    ) -> tuple[int, dict[str, str], bytes]:
        try:
            answer = await connection.exchange(data, limit, has_body=has_body)
        except BaseException:
            connection.abort()
            raise
        if connection.reusable:
            self._release(connection)
        else:  # not kept: closed at once (a graceful close would wait on a request body the server ignores)
            connection.abort()
        return answer

    def _encode(
        self,
        method: str,
        host: str,
        port: int,
        scheme: str,
        target: str,
        headers: dict[str, str] | Headers,
        body: bytes,
        absolute: str = "",
    ) -> tuple[bytes, ...]:
        if type(headers) is tuple:  # merged from a shared mapping (``_headers``): the head encoded once
            key2 = (id(headers), method, host, port, scheme, target, absolute)
            hit = self._heads.get(key2)
            if hit is not None and hit[0] is headers:
                head_text = hit[1]
            else:
                if len(self._heads) >= _SHARED_ENTRIES:
                    self._heads.clear()
                head_text = self._head(method, host, port, scheme, target, headers, absolute)
                self._heads[key2] = (headers, head_text)
        else:
            head_text = self._head(method, host, port, scheme, target, headers, absolute)
        if body or method in ("POST", "PUT", "PATCH"):
            head_text = f"{head_text}Content-Length: {len(body)}\r\n\r\n"
        else:
            head_text += "\r\n"
        head = head_text.encode("latin-1", errors="strict")
        if not body:
            return (head,)
        return (head + body,) if len(body) < 65536 else (head, body)  # a large body is not copied

    def _head(
        self,
        method: str,
        host: str,
        port: int,
        scheme: str,
        target: str,
        headers: dict[str, str] | Headers,
        absolute: str,
    ) -> str:
        """The request line and the headers, without the Content-Length and the blank line."""
        key = (host, scheme, port)
        host_header = self._head_cache.get(key)
        if host_header is None:
            default = 443 if scheme == "https" else 80
            shown = f"[{host}]" if ":" in host else host
            host_header = shown if port == default else f"{shown}:{port}"
            if len(self._head_cache) > 1024:
                self._head_cache.clear()
            self._head_cache[key] = host_header
        items = headers.items() if isinstance(headers, dict) else headers
        if absolute:  # "http://": the request line names the origin (a proxy's absolute form)
            target = f"{absolute}{host_header}{target}"
        lines = [f"{method} {target} HTTP/1.1\r\nHost: {host_header}\r\n"]
        for name, value in items:
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise InvalidHeader("header names and values must not contain line breaks")
            if name.lower() in FRAMING:  # the URL's host and the body's length, never the caller's
                continue
            lines.append(f"{name}: {value}\r\n")
        return "".join(lines)

    def _expires(self, connection: _Connection) -> float:
        limit = self.idle_timeout
        if connection.keep_alive_for is not None:
            limit = min(limit, connection.keep_alive_for)
        return connection.idle_since + limit

    def _pooled(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to have been closed
            self._idle_count -= 1
            if connection.closed or connection.transport is None or connection.transport.is_closing():
                continue
            if now >= self._expires(connection):
                connection.abort()
                continue
            return connection
        return None

    def _release(self, connection: _Connection) -> None:
        idle = self._idle.get(connection.origin)
        if idle is None:
            idle = self._idle[connection.origin] = deque()
        connection.idle_since = time.monotonic()
        idle.append(connection)
        self._idle_count += 1
        if len(idle) > self.max_idle_per_origin:
            idle.popleft().abort()
            self._idle_count -= 1
        if len(idle) > 1 and idle[0].closed:  # drop the dead from the oldest end as we go
            idle.popleft()
            self._idle_count -= 1
        if self._idle_count > self.max_idle:
            self._evict_oldest()
        if self._reaper is None:
            delay = self._expires(connection) - connection.idle_since
            self._reaper = asyncio.get_running_loop().call_later(delay + 0.01, self._reap)

    def _evict_oldest(self) -> None:
        """Past ``max_idle``: close the connection idle the longest, whatever its origin."""
        oldest: deque[_Connection] | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest is not None:
            oldest.popleft().abort()
            self._idle_count -= 1

    def _reap(self) -> None:
        """The idle timer: close what has been idle too long (or was closed), then sleep until the next expiry.
        One timer per client, armed only while connections are idle."""
        self._reaper = None
        now = time.monotonic()
        soonest: float | None = None
        for origin in list(self._idle):
            idle = self._idle[origin]
            kept: deque[_Connection] = deque()
            for connection in idle:
                expires = self._expires(connection)
                if connection.closed or now >= expires:
                    connection.abort()
                    continue
                kept.append(connection)
                soonest = expires if soonest is None else min(soonest, expires)
            self._idle_count -= len(idle) - len(kept)
            if kept:
                self._idle[origin] = kept
            else:
                del self._idle[origin]
        if soonest is not None:
            self._reaper = asyncio.get_running_loop().call_later(max(0.0, soonest - now) + 0.01, self._reap)

    @property
    def idle_connections(self) -> int:
        """Pooled connections still open (observability and tests)."""
        return sum(1 for idle in self._idle.values() for c in idle if not c.closed)

    async def _connect(self, origin: Origin, context: ssl.SSLContext | None) -> _Connection:
        scheme, host, port, _, proxy = origin
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                if not proxy:
                    _, protocol = await loop.create_connection(
                        lambda: _Connection(origin),
                        host,
                        port,
                        ssl=context,
                        server_hostname=host if context is not None else None,
                        happy_eyeballs_delay=0.25,
                    )
                    return protocol
                if proxy.startswith(SOCKS_SCHEMES):
                    sock = await socks_tunnel(proxy, host, port)
                    _, protocol = await loop.create_connection(
                        lambda: _Connection(origin),
                        sock=sock,
                        ssl=context,
                        server_hostname=host if context is not None else None,
                    )
                    return protocol
                if scheme == "http":  # the absolute form: the connection is to the proxy itself
                    proxy_host, proxy_port, proxy_tls = _proxy_address(proxy)
                    try:
                        _, protocol = await loop.create_connection(
                            lambda: _Connection(origin),
                            proxy_host,
                            proxy_port,
                            ssl=proxy_tls,
                            server_hostname=proxy_host if proxy_tls is not None else None,
                        )
                    except OSError:  # refused, unreachable, not resolved: the proxy's, not the origin's
                        raise ProxyUnreachable() from None
                    return protocol
                return await self._tunnel(origin, context)
        except socket.gaierror:
            raise DNSError() from None

    async def _tunnel(self, origin: Origin, context: ssl.SSLContext | None) -> _Connection:
        """HTTP CONNECT through the proxy, then TLS to the origin inside the tunnel (Go's and aiohttp's way
        for an https URL). A refusal (any status but 200) is a ``ProxyError``, retried as before."""
        _, host, port, _, proxy = origin
        loop = asyncio.get_running_loop()
        proxy_host, proxy_port, proxy_tls = _proxy_address(proxy)
        try:
            transport, opening = await loop.create_connection(
                _ConnectOpening,
                proxy_host,
                proxy_port,
                ssl=proxy_tls,
                server_hostname=proxy_host if proxy_tls is not None else None,
            )
        except OSError:
            raise ProxyUnreachable() from None
        try:
            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            head = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
            credentials = proxy_credentials(proxy)
            if credentials:
                head += f"Proxy-Authorization: {credentials}\r\n"
            transport.write((head + "\r\n").encode("latin-1"))
            await opening.established()
            connection = _Connection(origin)
            if context is None:  # not reached: plain http goes in the absolute form
                transport.set_protocol(connection)
                connection.connection_made(transport)
                return connection
            tls = await loop.start_tls(transport, connection, context, server_hostname=host)
            assert tls is not None
            connection.connection_made(tls)
            return connection
        except BaseException:
            transport.abort()
            raise

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for idle in self._idle.values():
            while idle:
                idle.pop().abort()
        self._idle.clear()
        self._idle_count = 0

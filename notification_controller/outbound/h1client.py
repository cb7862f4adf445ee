"""A small HTTP/1.1 client for direct requests, on ``httptools`` (llhttp), with a keep-alive pool.

``OutboundHTTP`` sends a request through it when nothing needs aiohttp: no proxy (explicit or from the
environment), an ``http``/``https`` URL, a usual method. aiohttp's client cost ~140 µs of CPU per POST on the
bench machine against ~40 µs here (16 concurrent requests to a local sink, ``bench/``), and a delivered
notification is one such POST (issue 17). Proxies (HTTP CONNECT, SOCKS) stay on aiohttp.

What it does:

* writes the request head and body in one ``write`` (``Host``, ``Content-Length`` and the caller's headers;
  nothing else: no ``Accept-Encoding``, no cookies, as Go's client without a jar);
* reads the response with llhttp: status, headers, a body capped at ``body_limit`` bytes (the rest is not
  read and the connection is closed), ``1xx`` interim answers skipped, a body delimited by the connection's
  end completed at EOF;
* keeps connections per origin (scheme, host, port, TLS context) for reuse while the server agrees
  (``Connection: close``, HTTP/1.0, ``Keep-Alive: timeout=N``) and for at most ``idle_timeout`` seconds idle;
  a connection the server closed is never reused; an idempotent request that finds a pooled connection closed
  before any answer is sent again once on a new connection (RFC 9112 §9.3.1, as aiohttp does);
* TLS with the caller's context or the default one (certificate and host name verified), happy eyeballs on
  dual-stack hosts, a connect timeout.

Errors are ``OSError`` subclasses (refused, reset, DNS in ``HostNotFound``, TLS verification as ``ssl``
raises it), ``ServerDisconnectedError``, ``InvalidResponse`` and ``InvalidRequest``: ``outbound/retry.py`` classifies them.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque

import httptools

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})  # HEAD's answer has no body: aiohttp's
MAX_IDLE_PER_ORIGIN = 64


class ServerDisconnectedError(ConnectionError):
    """The server closed the connection before a complete answer."""


class HostNotFound(OSError):
    """DNS resolution failed."""


class InvalidResponse(ValueError):
    """The answer is not HTTP/1.1 we can read."""


class InvalidRequest(ValueError):
    """A header name or value would break the request (a line break in it)."""


# scheme, host, port and the TLS context itself (not its id: a pooled connection verified under one context
# is never lent to a request that asked for another, even after the first was freed)
Origin = tuple[str, str, int, ssl.SSLContext | None]


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
        self._framed = False
        self._reusable = False

    # ---- asyncio.Protocol --------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._received = True
        if self._waiter is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.abort()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._finish_error(InvalidResponse(f"invalid HTTP response: {exc}"))
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
        if self._head_done and not self._framed:
            self._complete(reusable=False)  # a body delimited by the end of the connection
            return
        error = ServerDisconnectedError("server closed the connection")
        if exc is not None:
            error.__cause__ = exc
        self._finish_error(error)

    # ---- llhttp callbacks --------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._headers = {}
        self._body = []
        self._size = 0
        self._head_done = False
        self._framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower == b"content-length" or (lower == b"transfer-encoding" and b"chunked" in value.lower()):
            self._framed = True  # the body's end is known: a connection ending before it cut the answer
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        self._headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._head_done = self._status >= 200

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
        self._complete(reusable=self._parser.should_keep_alive())

    # ---- one exchange ------------------------------------------------------------------------------------
    async def exchange(self, data: tuple[bytes, ...], limit: int) -> tuple[int, dict[str, str], bytes]:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, dict[str, str], bytes]] = loop.create_future()
        self._waiter = waiter
        self._limit = limit
        self._received = False
        self._reusable = False
        self._head_done = False
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
        # an answer that came before the whole request was sent (an early 4xx) leaves the server out of step
        transport = self.transport
        reusable = reusable and transport is not None and transport.get_write_buffer_size() == 0
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


class H1Client:
    """Direct HTTP/1.1 requests with a keep-alive pool. ``close`` closes every pooled connection."""

    def __init__(self, *, idle_timeout: float = 15.0, connect_timeout: float = 30.0) -> None:
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._default_tls: ssl.SSLContext | None = None
        self._head_cache: dict[tuple[str, str, int], str] = {}

    def default_tls(self) -> ssl.SSLContext:
        if self._default_tls is None:
            self._default_tls = ssl.create_default_context()  # SSL_CERT_FILE/SSL_CERT_DIR honoured
        return self._default_tls

    async def request(
        self,
        method: str,
        scheme: str,
        host: str,
        port: int,
        target: str,
        headers: dict[str, str] | list[tuple[str, str]],
        body: bytes,
        *,
        tls: ssl.SSLContext | None = None,
        body_limit: int,
    ) -> tuple[int, dict[str, str], bytes]:
        """One exchange: (status, headers, body ≤ ``body_limit`` bytes). ``target`` is the path and query."""
        context = (tls or self.default_tls()) if scheme == "https" else None
        origin: Origin = (scheme, host, port, context)
        data = self._encode(method, host, port, scheme, target, headers, body)
        connection = self._pooled(origin)
        if connection is not None:
            try:
                return await self._exchange(connection, data, body_limit)
            except (ServerDisconnectedError, ConnectionResetError, BrokenPipeError):
                # a kept connection the server had closed: send again on a new one if the method allows
                if not (connection.answered_nothing and method in IDEMPOTENT):
                    raise
        connection = await self._connect(origin, context)
        return await self._exchange(connection, data, body_limit)

    async def _exchange(
        self, connection: _Connection, data: tuple[bytes, ...], limit: int
    ) -> tuple[int, dict[str, str], bytes]:
        try:
            answer = await connection.exchange(data, limit)
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
        headers: dict[str, str] | list[tuple[str, str]],
        body: bytes,
    ) -> tuple[bytes, ...]:
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
        lines = [f"{method} {target} HTTP/1.1\r\nHost: {host_header}\r\n"]
        has_length = False
        for name, value in items:
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                raise InvalidRequest("header names and values must not contain line breaks")
            lower = name.lower()
            if lower == "host":
                continue
            if lower == "content-length":
                has_length = True
            lines.append(f"{name}: {value}\r\n")
        if not has_length and (body or method in ("POST", "PUT", "PATCH")):
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append("\r\n")
        head = "".join(lines).encode("latin-1", errors="strict")
        if not body:
            return (head,)
        return (head + body,) if len(body) < 65536 else (head, body)  # a large body is not copied

    def _pooled(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to have been closed
            limit = self.idle_timeout
            if connection.keep_alive_for is not None:
                limit = min(limit, connection.keep_alive_for)
            if connection.closed or connection.transport is None or connection.transport.is_closing():
                continue
            if now - connection.idle_since >= limit:
                connection.abort()
                continue
            return connection
        return None

    def _release(self, connection: _Connection) -> None:
        idle = self._idle.setdefault(connection.origin, deque())
        connection.idle_since = time.monotonic()
        idle.append(connection)
        while len(idle) > MAX_IDLE_PER_ORIGIN:
            idle.popleft().abort()
        if len(idle) > 1 and idle[0].closed:  # drop the dead from the oldest end as we go
            idle.popleft()

    async def _connect(self, origin: Origin, context: ssl.SSLContext | None) -> _Connection:
        _, host, port, _ = origin
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await loop.create_connection(
                    lambda: _Connection(origin),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                    happy_eyeballs_delay=0.25,
                )
        except socket.gaierror as exc:
            raise HostNotFound(exc.errno, exc.strerror) from exc
        return protocol

    async def close(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().abort()
        self._idle.clear()

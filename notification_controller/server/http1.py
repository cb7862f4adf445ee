"""A small HTTP/1.1 server for one endpoint, on ``httptools`` (llhttp, the parser of Node.js and uvicorn).

Why not aiohttp's server here: the event endpoint answers one POST with a few bytes, thousands of times a
second, and aiohttp's request machinery (router, ``Request``/``Response`` objects, header multidicts, a task
per request, the writer) cost ~45 µs of CPU per request on the bench machine, against ~12 µs for a protocol
that parses with llhttp and writes the answer itself (issue 17, ``python -m bench``). The receiver, health and
metrics servers stay on aiohttp: they are not hot, and the receiver needs its router.

What it does, and only this:

* **Requests** are parsed by llhttp in strict mode: a bad request line or header name, obsolete line folding,
  Content-Length together with chunked, two Content-Lengths → 400 and the connection is closed. Limits as
  aiohttp's parser: a request line or header line over ``max_line`` bytes, more than ``max_headers`` headers
  → 400. A body is read completely (chunked or not) before the handler runs; more than ``max_body`` bytes →
  413 (at once when Content-Length says so), and the connection is closed.
* **Handlers** are synchronous callables returning a ``Response`` — the common case costs no task — or an
  awaitable of one, run on a task that is cancelled if the client goes away. Answers on a connection keep
  the order of its (pipelined) requests; while one is on a task, the next requests wait, and reading pauses
  when ``max_pipelined`` are waiting. ``Expect: 100-continue`` gets its interim answer unless the body is
  too large.
* **Slow clients**: a connection must deliver a complete request head within ``header_timeout`` of its
  accept or of its previous answer (idle keep-alive connections are closed by the same timer, as aiohttp's
  keep-alive timer does); a body must arrive within ``body_timeout`` of its head → 400. After an answer that
  closes the connection, unread input is discarded for at most ``lingering_time`` (the client reads the
  answer instead of a reset), then the socket is closed. One timer per connection, moved lazily: keeping a
  connection busy costs no timer operations.
* **Shutdown**: stop accepting, close idle connections, let requests in progress answer for up to a grace
  period, then abort.

Every answer carries ``Date`` and ``Content-Length``; there is no ``Server`` header.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol

import httptools

log = logging.getLogger(__name__)

_CRLF = b"\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_TEXT = "text/plain; charset=utf-8"


@dataclass(slots=True)
class Request:
    """One parsed request. ``headers`` are raw ``(name, value)`` byte pairs in arrival order; ``header``
    looks one up case-insensitively (handlers read one or two, so no dict is built)."""

    method: str
    path: str
    headers: list[tuple[bytes, bytes]]
    version: str
    keep_alive: bool
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The last value of a header (latin-1, as HTTP/1.1 defines octets), or None."""
        wanted = name.lower().encode("latin-1")
        found: bytes | None = None
        for field_name, value in self.headers:
            if len(field_name) == len(wanted) and field_name.lower() == wanted:
                found = value
        return None if found is None else found.decode("latin-1")


@dataclass(slots=True)
class Response:
    """An answer: status, extra headers (``Date``, ``Content-Length`` and ``Connection`` are added), body."""

    status: int
    headers: dict[str, str] | None = None
    body: bytes = b""
    close: bool = field(default=False, kw_only=True)

    @classmethod
    def text(
        cls, status: int, text: str, headers: dict[str, str] | None = None, *, close: bool = False
    ) -> Response:
        """A plain-text answer (``text/plain; charset=utf-8``, as aiohttp's and Go's text answers)."""
        merged = {"Content-Type": _TEXT}
        if headers:
            merged.update(headers)
        return cls(status, merged, text.encode("utf-8"), close=close)


class Handler(Protocol):
    """What the server calls. ``refused`` is told about requests answered (or abandoned) by the server
    itself — body too large (413), body too slow (400), client gone before the answer (499, the answer is
    not sent) — so the handler's metrics see them as they saw them under aiohttp."""

    def __call__(self, request: Request) -> Response | Awaitable[Response]: ...

    def refused(self, request: Request, status: int) -> Response: ...


# ---- answers ---------------------------------------------------------------------------------------------

_status_lines: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _status_lines.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Unknown"
        line = _status_lines[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")
    return line


class _DateHeader:
    """``Date: <IMF-fixdate>\\r\\n``, formatted once per second."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def get(self) -> bytes:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._value = f"Date: {formatdate(second, usegmt=True)}\r\n".encode("ascii")
        return self._value


_date = _DateHeader()


def encode_response(
    response: Response, *, head_only: bool = False, close: bool = False, http10: bool = False
) -> bytes:
    """The bytes of an answer. ``close`` adds ``Connection: close``; an HTTP/1.0 keep-alive answer says
    ``Connection: keep-alive`` (1.0 closes by default)."""
    parts = [_status_line(response.status)]
    if response.headers:
        parts.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in response.headers.items())
    parts.append(_date.get())
    parts.append(b"Content-Length: %d\r\n" % len(response.body))
    if close:
        parts.append(b"Connection: close\r\n")
    elif http10:
        parts.append(b"Connection: keep-alive\r\n")
    parts.append(_CRLF)
    if response.body and not head_only:
        parts.append(response.body)
    return b"".join(parts)


_BAD_REQUEST = Response.text(400, "Bad Request\n", close=True)


# ---- the connection --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """The parser's and the connection's limits (defaults: aiohttp's parser, Flux's timeouts)."""

    max_body: int
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    lingering_time: float = 2.0
    max_line: int = 8190
    max_headers: int = 128
    max_pipelined: int = 16


class _ParseLimit(Exception):
    """A limit was crossed while parsing; ``status`` is the answer (400 or 413)."""

    def __init__(self, status: int) -> None:
        self.status = status


# connection states
_HEAD = 0  # waiting for (the rest of) a request head: the header timer runs
_BODY = 1  # head complete, body incomplete: the body timer runs
_IDLE_HANDLING = 2  # complete requests are being answered: no timer
_DISCARD = 3  # answered and closing: input discarded until lingering_time ends


class Connection(asyncio.Protocol):
    def __init__(self, server: HTTPServer) -> None:
        self._server = server
        self._handler = server.handler
        self._limits = server.limits
        self._loop = server.loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._body_size = 0
        self._head: Request | None = None  # the request whose head is complete, body still coming
        self._ready: deque[Request] = deque()  # complete requests not answered yet (pipelining)
        self._task: asyncio.Task[Response] | None = None  # the request answered on a task
        self._task_request: Request | None = None
        self._state = _HEAD
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._closing = False  # close once the current answers are written
        self._paused = False
        self._write_paused = False

    # ---- asyncio.Protocol --------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._server.connections.add(self)
        self._arm(self._loop.time() + self._limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._cancel_timer()
        transport, self._transport = self._transport, None
        del transport
        if self._task is not None:  # the client went away while its answer was being made
            self._task.cancel()
        elif self._state == _BODY and self._head is not None:
            self._refused(self._head, 499)
        self._ready.clear()

    def data_received(self, data: bytes) -> None:
        if self._state == _DISCARD:
            return
        try:
            self._parser.feed_data(data)
        except _ParseLimit as exc:
            self._fail(exc.status)
            return
        except httptools.HttpParserUpgrade:
            # llhttp stops after the head of an Upgrade request (h2c, websocket), before its body: there is no
            # upgrade to offer, and the rest of the stream is not HTTP/1.1 we can read → 400 and close
            log.debug("upgrade request from %s refused", self._peer())
            self._fail(400)
            return
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, _ParseLimit):  # raised in a callback: llhttp wraps it
                self._fail(cause.status)
            else:
                log.debug("bad request from %s: %s", self._peer(), exc)
                self._fail(400)
            return
        if self._state == _BODY and self._deadline == 0.0:
            self._arm(self._loop.time() + self._limits.body_timeout)
        if self._ready and self._task is None:
            self._answer_ready()

    def eof_received(self) -> bool | None:
        # The client closed its side: it is gone, as aiohttp (handler cancellation) and Go (the request's
        # context is cancelled) see it. The transport closes; connection_lost cancels an answer in progress
        # and reports a request whose body was still coming (499).
        return False

    def pause_writing(self) -> None:  # the client does not read its answers: stop reading its requests
        self._write_paused = True
        self._pause()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._ready and self._task is None:
            self._answer_ready()  # resumes reading once every waiting request is answered
        elif not self._ready:
            self._resume()

    # ---- llhttp callbacks --------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._body = []
        self._body_size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._limits.max_line:
            raise _ParseLimit(400)

    def on_header(self, name: bytes, value: bytes) -> None:
        if (
            len(name) + len(value) + 2 > self._limits.max_line
            or len(self._headers) >= self._limits.max_headers
        ):
            raise _ParseLimit(400)
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        parsed = httptools.parse_url(self._url)
        request = Request(
            parser.get_method().decode("ascii"),
            parsed.path.decode("latin-1") if parsed.path else "/",
            self._headers,
            parser.get_http_version(),
            parser.should_keep_alive(),
        )
        self._head = request
        self._state = _BODY
        self._deadline = 0.0  # set after this read if the body is still incomplete
        length = request.header("content-length")
        if length is not None and length.isdigit() and int(length) > self._limits.max_body:
            raise _ParseLimit(413)
        if request.version == "1.1":
            expect = request.header("expect")
            if expect is not None and expect.lower() == "100-continue" and self._transport is not None:
                self._transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._limits.max_body:
            raise _ParseLimit(413)
        self._body.append(body)

    def on_message_complete(self) -> None:
        request = self._head
        if request is None:  # pragma: no cover - llhttp completes only messages it began
            return
        self._head = None
        request.body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body = []
        self._ready.append(request)
        self._state = _IDLE_HANDLING
        if len(self._ready) >= self._limits.max_pipelined:
            self._pause()

    # ---- answering ---------------------------------------------------------------------------------------
    def _answer_ready(self) -> None:
        handler = self._handler
        while self._ready and self._transport is not None and not self._write_paused:
            request = self._ready.popleft()
            try:
                result = handler(request)
            except Exception:
                log.exception("event server: handling %s %s failed", request.method, request.path)
                result = Response.text(500, "Internal Server Error\n")
            if isinstance(result, Response):
                self._write(request, result)
                continue
            self._task_request = request
            self._task = task = asyncio.ensure_future(result)
            task.add_done_callback(self._task_done)
            return
        if self._transport is not None and not self._ready and self._task is None:
            self._resume()
            self._idle()
        elif self._ready:
            self._pause()  # the client does not read its answers: no more requests until it does

    def _task_done(self, task: asyncio.Task[Response]) -> None:
        request, self._task_request = self._task_request, None
        self._task = None
        if task.cancelled() or request is None:
            return
        exc = task.exception()
        if exc is not None:
            log.error("event server: handling %s %s failed", request.method, request.path, exc_info=exc)
            response = Response.text(500, "Internal Server Error\n")
        else:
            response = task.result()
        if self._transport is None:
            return
        self._write(request, response)
        if self._transport is not None:
            self._answer_ready()

    def _write(self, request: Request, response: Response) -> None:
        transport = self._transport
        if transport is None:
            return
        close = response.close or self._closing or not request.keep_alive or self._server.stopping
        transport.write(
            encode_response(
                response,
                head_only=request.method == "HEAD",
                close=close,
                http10=request.version == "1.0",
            )
        )
        if close:
            self._ready.clear()
            self._linger()

    def _idle(self) -> None:
        """Every answer written: wait for the next request head (the keep-alive/header timer)."""
        if self._closing:
            self._linger()
            return
        if self._state == _IDLE_HANDLING:
            self._state = _HEAD
            self._arm(self._loop.time() + self._limits.header_timeout)

    def _fail(self, status: int) -> None:
        """A request the parser or a limit refused: answer, then close (its body is not read)."""
        request = self._head
        self._head = None
        if request is not None:
            response = self._refused(request, status)
        else:
            response = (
                _BAD_REQUEST if status == 400 else Response.text(status, f"{HTTPStatus(status).phrase}\n")
            )
        if self._task is not None:  # an earlier pipelined request is being answered: it is abandoned too
            self._task.cancel()
            self._task = None
        self._ready.clear()
        if self._transport is not None:
            response.close = True
            self._transport.write(encode_response(response, close=True))
        self._linger()

    def _refused(self, request: Request, status: int) -> Response:
        try:
            return self._handler.refused(request, status)
        except Exception:
            log.exception("event server: recording a refused request failed")
            return Response.text(status, f"{HTTPStatus(status).phrase}\n", close=True)

    def _linger(self) -> None:
        """Half-close after the answer; discard input for at most ``lingering_time``, then close."""
        transport = self._transport
        self._state = _DISCARD
        if transport is None:
            return
        self._resume()
        if transport.can_write_eof():
            try:
                transport.write_eof()
            except OSError:
                transport.abort()
                return
        self._arm(self._loop.time() + self._limits.lingering_time, force=True)

    def close_if_idle(self) -> bool:
        """Shutdown: close a connection that is between requests; the others close after their answer."""
        self._closing = True
        if self._transport is None:
            return True
        if self._task is None and not self._ready and self._state in (_HEAD, _DISCARD):
            self._transport.close()
            return True
        return False

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    @property
    def busy(self) -> bool:
        return self._task is not None or bool(self._ready)

    # ---- flow control and the timer ----------------------------------------------------------------------
    def _pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def _resume(self) -> None:
        if self._paused and self._transport is not None and not self._write_paused:
            self._paused = False
            self._transport.resume_reading()

    def _arm(self, deadline: float, *, force: bool = False) -> None:
        """Move the deadline. The timer only moves when the new deadline is earlier than the timer."""
        self._deadline = deadline
        if self._timer is None or force or deadline < self._timer_at:
            self._cancel_timer()
            self._timer_at = deadline
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None:
            return
        now = self._loop.time()
        if self._state == _IDLE_HANDLING:
            return  # a request is being answered; the timer is armed again when it is
        if now < self._deadline:  # moved later while the timer waited
            self._timer_at = self._deadline
            self._timer = self._loop.call_at(self._deadline, self._on_timer)
            return
        if self._state == _BODY and self._head is not None:
            log.debug(
                "event server: body from %s not received within %gs", self._peer(), self._limits.body_timeout
            )
            self._fail(400)
        else:  # no request head in time, an idle keep-alive connection, or the lingering time is over
            transport.close()

    def _peer(self) -> str:
        peer = self._transport.get_extra_info("peername") if self._transport is not None else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "a client"


# ---- the server ------------------------------------------------------------------------------------------


class HTTPServer:
    """Serves ``handler`` on one address; ``start`` binds, ``stop`` shuts down gracefully."""

    def __init__(self, handler: Handler, limits: ServerLimits) -> None:
        self.handler = handler
        self.limits = limits
        self.connections: set[Connection] = set()
        self.stopping = False
        self._server: asyncio.Server | None = None
        self.loop = asyncio.get_running_loop()

    async def start(self, host: str | None, port: int, *, reuse_address: bool = True) -> int:
        """Listen; returns the bound port (``port`` 0 picks a free one)."""
        self._server = await self.loop.create_server(
            lambda: Connection(self), host or None, port, reuse_address=reuse_address
        )
        sockets = self._server.sockets or ()
        return int(sockets[0].getsockname()[1]) if sockets else port

    @property
    def port(self) -> int:
        sockets = self._server.sockets if self._server is not None else ()
        return int(sockets[0].getsockname()[1]) if sockets else 0

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting; close idle connections; give the others ``grace`` seconds to answer."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        deadline = self.loop.time() + grace
        while True:
            open_ = [c for c in list(self.connections) if not c.close_if_idle()]
            if not open_ or self.loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            if connection.busy:
                connection.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

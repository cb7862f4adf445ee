"""A small HTTP/1.1 server for one endpoint, on ``httptools`` (llhttp, the parser of Node.js and uvicorn).

Why not aiohttp's server here: the event endpoint answers one POST with a few bytes, thousands of times a
second, and aiohttp's request machinery (router, ``Request``/``Response`` objects, header multidicts, a task
per request, the writer) cost ~45 µs of CPU per request on the bench machine, against ~12 µs for a protocol
that parses with llhttp and writes the answer itself (issue 17, ``python -m bench``). The receiver listener
(``server/receivers.py``) is served by it too since issue 29; the health and metrics servers stay on aiohttp.

What it does, and only this:

* **Requests** are parsed by llhttp in strict mode: a bad request line or header name, obsolete line folding,
  Content-Length together with chunked, two Content-Lengths → 400 and the connection is closed.
* **The head is bounded as it arrives** (issue 23 item 2): llhttp's Python binding concatenates a header
  name or value across reads and hands it over only when it is complete, so a size check on the complete
  header let one endless header grow without limit (48 connections: RSS 58 MB → 1.42 GB in 10 s). The
  input is therefore fed in slices of ``_SLICE`` bytes and, while a head is incomplete, the length of its
  unfinished line is counted from the raw bytes: past ``max_line`` plus one slice → 431 and close. Complete
  heads are checked exactly: a header line over ``max_line`` (8190, aiohttp's) or more than ``max_headers``
  (128) → 431 (RFC 6585, Go, Node; aiohttp says 400); a request line over ``max_line`` → 414. So a head is at
  most ~1 MiB (128 × 8 KiB, Go's ``DefaultMaxHeaderBytes`` is 1 MiB too), and no header is kept past one line
  plus one slice while it arrives.
* **Framing and expectations, as Go's net/http and aiohttp** (item 16; the stricter of the two where they
  differ): an HTTP/1.1 request without ``Host``, or any request with two → 400 (RFC 9112 §3.2; both). Two
  ``Transfer-Encoding`` lines or ``chunked`` not last or twice → 400 (RFC 9112 §6.3: the length cannot be
  determined; aiohttp 400, Go 501); another coding before ``chunked`` (``gzip, chunked``) → 501 Not Implemented
  (RFC 9112 §6.1's SHOULD; Go 501, aiohttp 400): the request is well framed, we do not implement the coding.
  ``Expect`` other than ``100-continue`` → 417 (RFC 9110 §10.1.1; Go for any version, aiohttp for 1.1).
  All of these answer before the body and close the connection.
* A body is read completely (chunked or not) before the handler runs; more than ``max_body`` bytes →
  413 (at once when Content-Length says so), and the connection is closed.
* **Handlers** are synchronous callables returning a ``Response`` — the common case costs no task — or an
  awaitable of one, run on a task. Answers on a connection keep the order of its (pipelined) requests; while
  one is on a task, the next requests wait. ``Expect: 100-continue`` gets its interim answer unless the body
  is too large, and never ahead of an earlier request's answer: it waits until those are written.
* **Pipelining is bounded** (item 7): a read (up to 256 KiB, ~9,700 tiny requests) used to be parsed whole,
  so a client that pipelined and never read pinned ~4 MB. Parsing stops once ``max_pipelined`` requests
  wait (the rest of the read is kept, reading pauses) and goes on as they are answered. A refused request
  is answered after the requests before it, never ahead of them.
* **A client that leaves** does not cancel the answer being made (item 8; Go and aiohttp's default let the
  handler finish too): with a durable store the event is then stored and counted once, where cancelling it
  half way lost it while its duplicate window stayed taken (its retries got 429 for five minutes). At most
  ``max_detached`` such answers are kept running per server; past that, and at the end of ``stop``'s grace,
  they are cancelled. A client that half-closes still gets its answers, then the connection is closed.
* **Slow clients**: a connection must deliver a complete request head within ``header_timeout`` of its
  accept or of its previous answer (idle keep-alive connections are closed by the same timer, as aiohttp's
  keep-alive timer does); a body must arrive within ``body_timeout`` of its head → 400. A client that does
  not read its answers (the write buffer stays above its high-water mark) for ``write_timeout`` is aborted
  (item 7). After an answer that closes the connection, unread input is discarded for at most
  ``lingering_time`` (the client reads the answer instead of a reset), then the socket is closed. One timer
  per connection, moved lazily: keeping a connection busy costs no timer operations.
* **Shutdown**: stop accepting, close idle connections, let requests in progress answer for up to a grace
  period, then abort.

Measured against: aiohttp 3.x's server and Go 1.22's net/http, on the cases of
``tests/adversarial/test_listener_abuse.py`` (statuses) and ``tests/unit/server/test_http1.py``; for CPU, aiohttp's
server in ``python -m bench`` (the figures above; 6.9 µs per request on a fake transport with the issue 23
limits).

What it leans on in httptools/llhttp beyond the documented callbacks: a header name or value is handed over
whole however the reads split it (the head bounds above count the unfinished line themselves because of
it), an exception raised in a callback comes back as ``HttpParserError`` with the original as
``__context__`` (how a 431/413/414 gets out), an Upgrade raises ``HttpParserUpgrade`` (not an
``HttpParserError``) after completing the message, strict mode refuses obsolete folding, Content-Length with
chunked, two Content-Lengths and bad header names, and ``feed_data`` takes a memoryview.
``tests/unit/test_dependency_internals.py`` asserts each directly: an httptools release that changes one
fails there, naming this module.

Every answer carries ``Date`` and ``Content-Length``; there is no ``Server`` header.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from types import MappingProxyType
from typing import Protocol

import httptools

log = logging.getLogger(__name__)

_CRLF = b"\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_TEXT = "text/plain; charset=utf-8"
# A read larger than _SLICE is fed to llhttp in slices: _SLICE bytes inside a body, _SMALL_SLICE elsewhere (a
# slice of tiny pipelined requests holds at most ~28 of them past max_pipelined). A head's unfinished line
# is checked after each slice, so it is refused at most one slice past max_line.
_SLICE = 4096
_SMALL_SLICE = 512
# Slices parsed per turn of the event loop (~16 KiB of tiny requests, 64 KiB of body): a 256 KiB read of
# pipelined requests is ~50 ms of work, and 30 such clients kept /healthz waiting for seconds.
_SLICES_PER_TURN = 32


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
    target: bytes = b""
    """The raw request-target (path and query, undecoded): the receiver matches it whole (a hook path)."""

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
    headers: Mapping[str, str] | None = None  # a ``MappingProxyType`` (of a dict never changed): encoded once
    body: bytes = b""
    close: bool = field(default=False, kw_only=True)

    @classmethod
    def text(
        cls, status: int, text: str, headers: Mapping[str, str] | None = None, *, close: bool = False
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
    headers = response.headers
    if headers:
        if type(headers) is MappingProxyType:  # shared by many answers (the 202's X-RateLimit-*): once
            hit = _encoded.get(id(headers))
            if hit is None or hit[0] is not headers:
                if len(_encoded) >= 16:
                    _encoded.clear()
                hit = _encoded[id(headers)] = (headers, _header_lines(headers))
            parts.append(hit[1])
        else:
            parts.append(_header_lines(headers))
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


def _header_lines(headers: Mapping[str, str]) -> bytes:
    return b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items())


_encoded: dict[int, tuple[Mapping[str, str], bytes]] = {}  # id -> (a read-only header map, its lines)
_BAD_REQUEST = Response.text(400, "Bad Request\n", close=True)


# ---- the connection --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """The parser's and the connection's limits (defaults: aiohttp's parser, Flux's timeouts)."""

    max_body: int
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    lingering_time: float = 2.0
    write_timeout: float = 10.0
    max_line: int = 8190
    max_headers: int = 128
    max_pipelined: int = 16
    max_detached: int = 64


class _ParseLimit(Exception):
    """A limit or rule was crossed while parsing; ``status`` is the answer (400, 413, 414, 417, 431, 501)."""

    def __init__(self, status: int) -> None:
        self.status = status


# connection states
_HEAD = 0  # waiting for (the rest of) a request head: the header timer runs
_BODY = 1  # head complete, body incomplete: the body timer runs
_IDLE_HANDLING = 2  # complete requests are being answered: no timer
_DISCARD = 3  # answered and closing: input discarded until lingering_time ends

# header names the server itself reads, by length (a length test is cheaper than lower-casing every name)
_WATCHED = frozenset({4, 6, 14, 17})


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
        # the head being parsed: the unfinished line's length (counted from the raw input while the head is
        # incomplete), and the headers the server reads itself
        self._in_head = False
        self._line = 0
        self._max_field = self._limits.max_line - 2  # name + value of a header line ("name: value")
        self._max_headers = self._limits.max_headers
        self._hosts = 0
        self._length: bytes | None = None
        self._expect: bytes | None = None
        self._te: bytes | None = None
        self._te_lines = 0
        self._head: Request | None = None  # the request whose head is complete, body still coming
        self._ready: deque[Request] = deque()  # complete requests not answered yet (pipelining)
        self._task: asyncio.Task[Response] | None = None  # the request answered on a task
        self._task_request: Request | None = None
        self._rest: bytes | None = None  # input read but not parsed yet (max_pipelined requests wait)
        self._rest_at = 0
        self._final: Response | None = None  # a refusal to write once the earlier requests are answered
        self._continue_due = False  # the head's 100 Continue waits for earlier answers
        self._turn_scheduled = False  # a large read is parsed over several turns of the loop
        self._state = _HEAD
        self._deadline = 0.0
        self._write_deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._closing = False  # close once the current answers are written
        self._eof = False  # the client half-closed: answer what it sent, then close
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
        task = self._task
        if task is not None:  # the client went away while its answer was being made: let it finish
            if not self._server.detach(task):
                task.cancel()
        elif self._head is not None:  # its body was still coming
            self._refused(self._head, 499)
        self._ready.clear()
        self._rest = None
        self._final = None

    def data_received(self, data: bytes) -> None:
        if self._state == _DISCARD or self._final is not None:
            return
        if len(data) > _SLICE or self._rest is not None:
            self._rest = data if self._rest is None else self._rest[self._rest_at :] + data
            self._rest_at = 0
            self._run()
            return
        try:
            self._parser.feed_data(data)
        except (_ParseLimit, httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._parse_failed(exc)
            return
        if self._in_head:
            if not self._head_line_ok(data, 0, len(data)):
                return
        elif self._state == _BODY and self._deadline == 0.0:
            self._arm(self._loop.time() + self._limits.body_timeout)
        if self._ready:
            self._run()

    def eof_received(self) -> bool | None:
        # The client closed its side. With nothing to answer, it is gone: the transport closes (an incomplete
        # request is reported as 499 by connection_lost). With requests to answer, they are answered (as Go
        # does; the handler is not cancelled either way), then the connection is closed.
        if self._task is None and not self._ready and self._rest is None:
            return False
        self._eof = True
        return True

    def pause_writing(self) -> None:  # the client does not read its answers: stop reading its requests
        self._write_paused = True
        self._write_deadline = self._loop.time() + self._limits.write_timeout
        self._schedule(self._write_deadline)
        self._pause()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._run()

    # ---- llhttp callbacks --------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._body = []
        self._body_size = 0
        self._in_head = True
        self._line = self._hosts = self._te_lines = 0
        self._length = self._expect = self._te = None

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._limits.max_line:
            raise _ParseLimit(414)

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self._headers
        if len(name) + len(value) > self._max_field or len(headers) >= self._max_headers:
            raise _ParseLimit(431)
        headers.append((name, value))
        if len(name) in _WATCHED:
            lowered = name.lower()
            if lowered == b"host":
                self._hosts += 1
            elif lowered == b"content-length":
                self._length = value
            elif lowered == b"expect":
                self._expect = value
            elif lowered == b"transfer-encoding":
                self._te = value
                self._te_lines += 1

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self._parser
        parsed = httptools.parse_url(self._url)
        version = parser.get_http_version()
        request = Request(
            parser.get_method().decode("ascii"),
            parsed.path.decode("latin-1") if parsed.path else "/",
            self._headers,
            version,
            parser.should_keep_alive(),
            b"",
            self._url,
        )
        self._head = request
        self._state = _BODY
        self._deadline = 0.0  # set after this read if the body is still incomplete
        if self._hosts != 1 and (self._hosts or version != "1.0"):
            raise _ParseLimit(400)  # RFC 9112 §3.2: 1.1 without Host, or two Hosts
        if self._te is not None:
            self._check_transfer_encoding(self._te)
        length = self._length
        if length is not None and length.isdigit() and int(length) > self._limits.max_body:
            raise _ParseLimit(413)
        expect = self._expect
        if expect is not None:
            if expect.lower() != b"100-continue":
                raise _ParseLimit(417)
            if version != "1.0" and self._transport is not None:
                if self._task is None and not self._ready:
                    self._transport.write(_CONTINUE)
                else:  # an earlier pipelined answer is not written yet: the 100 follows it
                    self._continue_due = True

    def _check_transfer_encoding(self, value: bytes) -> None:
        if self._te_lines > 1:
            raise _ParseLimit(400)  # two lines: the framing is ambiguous (as two Content-Lengths)
        codings = [coding.strip() for coding in value.lower().split(b",")]
        if codings == [b"chunked"]:
            return
        if codings[-1] != b"chunked" or b"chunked" in codings[:-1]:
            raise _ParseLimit(400)  # RFC 9112 §6.3: the length cannot be determined
        raise _ParseLimit(501)  # a coding before chunked (gzip, chunked): well framed, not implemented

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
        self._continue_due = False
        request.body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body = []
        self._ready.append(request)
        self._state = _IDLE_HANDLING

    # ---- parsing -----------------------------------------------------------------------------------------
    def _parse(self, data: bytes, start: int, end: int) -> bool:
        """Feed ``data[start:end]`` to llhttp; False when the request was refused (answered or queued)."""
        try:
            self._parser.feed_data(memoryview(data)[start:end])
        except (_ParseLimit, httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._parse_failed(exc)
            return False
        if self._in_head:
            return self._head_line_ok(data, start, end)
        if self._state == _BODY and self._deadline == 0.0:
            self._arm(self._loop.time() + self._limits.body_timeout)
        return True

    def _head_line_ok(self, data: bytes, start: int, end: int) -> bool:
        """The head is still incomplete after ``data[start:end]``: bound its unfinished line as it arrives."""
        newline = data.rfind(b"\n", start, end)
        self._line = end - newline - 1 if newline >= 0 else self._line + end - start
        # the count may include the end of a previous message in this slice: at most one slice too much
        if self._line <= self._limits.max_line + _SLICE:
            return True
        log.debug("header line from %s over %d bytes", self._peer(), self._limits.max_line)
        self._fail(431)
        return False

    def _parse_failed(self, exc: Exception) -> None:
        if isinstance(exc, _ParseLimit):
            self._fail(exc.status)
        elif isinstance(exc, httptools.HttpParserUpgrade):
            # llhttp stops after the head of an Upgrade request (h2c, websocket), before its body: there is no
            # upgrade to offer, and the rest of the stream is not HTTP/1.1 we can read → 400 and close. llhttp
            # completed the message (no body is read for an upgrade): it is refused, not answered.
            log.debug("upgrade request from %s refused", self._peer())
            self._head = self._ready.pop() if self._ready else self._head
            self._fail(400)
        elif isinstance(exc.__context__, _ParseLimit):  # raised in a callback: llhttp wraps it
            self._fail(exc.__context__.status)
        else:
            log.debug("bad request from %s: %s", self._peer(), exc)
            self._fail(400)

    def _run(self) -> None:
        """Answer what is ready and parse held input, until both are used up or the connection must wait (an
        answer on a task, a client that does not read, ``max_pipelined`` requests waiting)."""
        budget = _SLICES_PER_TURN
        while True:
            if self._ready and self._task is None and not self._write_paused:
                self._answer_ready()
            if self._transport is None or self._state == _DISCARD:
                return
            rest = self._rest
            if rest is None:
                break
            if len(self._ready) >= self._limits.max_pipelined:
                self._pause()  # the rest is parsed once these are answered
                return
            budget -= 1
            if budget < 0:  # a turn of the loop for the other connections (and /healthz) first
                self._pause()
                self._schedule_turn()
                return
            start = self._rest_at
            end = min(len(rest), start + (_SLICE if self._state == _BODY else _SMALL_SLICE))
            if end == len(rest):
                self._rest = None
            else:
                self._rest_at = end
            if not self._parse(rest, start, end):
                return
        if self._task is not None or self._ready:  # _task_done or resume_writing runs this again
            if len(self._ready) >= self._limits.max_pipelined:
                self._pause()
            return
        if self._final is not None:  # a refused request, now that the requests before it are answered
            self._write_final()
            return
        if self._continue_due:
            self._continue_due = False
            if self._head is not None:
                self._transport.write(_CONTINUE)
        self._resume()
        self._idle()

    def _schedule_turn(self) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self._loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._turn_scheduled = False
        if self._transport is not None:
            self._run()

    # ---- answering ---------------------------------------------------------------------------------------
    def _answer_ready(self) -> None:
        handler = self._handler
        while self._ready and self._task is None and not self._write_paused and self._transport is not None:
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
        if self._transport is None:  # the client left: the answer was made, nobody reads it
            return
        self._write(request, response)
        self._run()

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
        if self._closing or self._eof:
            self._linger()
            return
        if self._state == _IDLE_HANDLING:
            self._state = _HEAD
            self._arm(self._loop.time() + self._limits.header_timeout)

    def _fail(self, status: int) -> None:
        """A request the parser, a limit or a rule refused: answer after the requests before it, then close
        (its body is not read)."""
        request = self._head
        self._head = None
        self._in_head = False
        self._rest = None
        if request is not None:
            response = self._refused(request, status)
        else:
            response = (
                _BAD_REQUEST if status == 400 else Response.text(status, f"{HTTPStatus(status).phrase}\n")
            )
            if self._server.on_malformed is not None:
                self._server.on_malformed(status)
        if self._task is not None or self._ready:  # earlier pipelined requests are answered first
            self._final = response
            self._state = _IDLE_HANDLING  # no body timer; nothing more is read
            self._pause()
            if self._task is None:
                self._schedule_turn()  # (a task's end, or resume_writing, answers them otherwise)
            return
        self._final = response
        self._write_final()

    def _write_final(self) -> None:
        response, self._final = self._final, None
        if response is not None and self._transport is not None:
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
        self._rest = None
        if transport is None:
            return
        if self._eof:  # the client sent everything already
            self._close()
            return
        self._resume()
        if transport.can_write_eof():
            try:
                transport.write_eof()
            except OSError:
                transport.abort()
                return
        self._arm(self._loop.time() + self._limits.lingering_time, force=True)

    def _close(self) -> None:
        """Close; answers not yet taken by the client get ``write_timeout`` to go, then the socket is aborted."""
        transport = self._transport
        if transport is None:
            return
        transport.close()
        if transport.get_write_buffer_size():
            self._cancel_timer()
            self._timer = self._loop.call_later(self._limits.write_timeout, transport.abort)

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

    @property
    def waiting(self) -> int:
        """Requests parsed and not answered yet (bounded by ``max_pipelined`` plus one small slice)."""
        return len(self._ready)

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
        self._schedule(deadline, force=force)

    def _schedule(self, when: float, *, force: bool = False) -> None:
        if self._timer is None or force or when < self._timer_at:
            self._cancel_timer()
            self._timer_at = when
            self._timer = self._loop.call_at(when, self._on_timer)

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
        if self._write_paused:  # the client does not read its answers
            if now >= self._write_deadline:
                log.debug(
                    "event server: %s did not read its answers within %gs",
                    self._peer(),
                    self._limits.write_timeout,
                )
                transport.abort()
            else:
                self._schedule(self._write_deadline)
            return
        if self._state == _IDLE_HANDLING:
            return  # a request is being answered; the timer is armed again when it is
        if now < self._deadline:  # moved later while the timer waited
            self._schedule(self._deadline)
            return
        if self._state == _BODY and self._head is not None:
            log.debug(
                "event server: body from %s not received within %gs", self._peer(), self._limits.body_timeout
            )
            self._fail(400)
        else:  # no request head in time, an idle keep-alive connection, or the lingering time is over
            self._close()

    def _peer(self) -> str:
        peer = self._transport.get_extra_info("peername") if self._transport is not None else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "a client"


# ---- the server ------------------------------------------------------------------------------------------


class HTTPServer:
    """Serves ``handler`` on one address; ``start`` binds, ``stop`` shuts down gracefully."""

    def __init__(
        self, handler: Handler, limits: ServerLimits, *, on_malformed: Callable[[int], None] | None = None
    ) -> None:
        self.handler = handler
        # told the status of a request refused before its head was complete (a bad request line or header,
        # a head over the limits): the receiver counts them (handlers see only requests with a head)
        self.on_malformed = on_malformed
        self.limits = limits
        self.connections: set[Connection] = set()
        self.detached: set[asyncio.Task[Response]] = set()  # answers whose client left, still being made
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

    def detach(self, task: asyncio.Task[Response]) -> bool:
        """Keep making an answer whose client left (False past ``max_detached``: the caller cancels it)."""
        if len(self.detached) >= self.limits.max_detached:
            return False
        self.detached.add(task)
        task.add_done_callback(self.detached.discard)
        return True

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting; close idle connections; give the others, and the answers whose client left,
        ``grace`` seconds to finish; then abort and cancel what is left."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        deadline = self.loop.time() + grace
        while True:
            open_ = [c for c in list(self.connections) if not c.close_if_idle()]
            if not open_ or self.loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        if self.detached:
            await asyncio.wait(set(self.detached), timeout=max(0.0, deadline - self.loop.time()))
        for connection in list(self.connections):
            if connection.busy:
                connection.abort()  # its answer is detached (below: cancelled)
        left = set(self.detached)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=1.0)  # let cancelled answers undo what they took
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

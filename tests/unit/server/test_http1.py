"""The event server's HTTP/1.1 layer (``server/http1.py``) on a real socket, with a handler that records
what it saw: ordering of pipelined answers (synchronous and on tasks), interim 100, HEAD, HTTP/1.0, Upgrade,
a failing handler, clients that leave, backpressure, the timers (moved lazily) and shutdown.

The endpoint's own behaviour (statuses, limits, metrics, slow clients at production settings) is tested
through the real controller in ``tests/adversarial/test_ingest_fuzz.py``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import pytest

from notification_controller.server.http1 import HTTPServer, Request, Response, ServerLimits

STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")
BIG = b"x" * 65536


@dataclass
class Recorder:
    """``/sync/<x>`` answers at once, ``/slow/<x>`` after ``delay`` on a task, ``/boom`` raises."""

    delay: float = 0.05
    seen: list[str] = field(default_factory=list)
    refused_with: list[tuple[str, int]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    def __call__(self, request: Request) -> Response | Awaitable[Response]:
        self.seen.append(request.path)
        if request.path == "/boom":
            raise RuntimeError("secret-token-in-a-traceback")
        if request.path.startswith("/slow/"):
            return self._slow(request)
        if request.path == "/big":
            return Response(200, None, BIG)
        return Response(200, {"X-Path": request.path}, request.body or request.path.encode())

    async def _slow(self, request: Request) -> Response:
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.append(request.path)
            raise
        return Response(200, {"X-Path": request.path}, request.path.encode())

    def refused(self, request: Request, status: int) -> Response:
        self.refused_with.append((request.path, status))
        return Response(status, close=True)


@pytest.fixture
async def served() -> AsyncIterator[tuple[HTTPServer, Recorder, int]]:
    recorder = Recorder()
    limits = ServerLimits(
        max_body=1000, header_timeout=0.4, body_timeout=0.4, lingering_time=0.2, max_pipelined=4
    )
    server = HTTPServer(recorder, limits)
    port = await server.start("127.0.0.1", 0)
    try:
        yield server, recorder, port
    finally:
        await server.stop(grace=1.0)


async def exchange(port: int, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Write ``data``, read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout):
            return await reader.read()
    finally:
        writer.close()


def statuses(raw: bytes) -> list[int]:
    return [int(m) for m in STATUS.findall(raw)]


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


async def test_pipelined_answers_keep_request_order_across_tasks(
    served: tuple[HTTPServer, Recorder, int],
) -> None:
    _, recorder, port = served
    paths = [
        "/slow/1",
        "/sync/2",
        "/slow/3",
        "/sync/4",
        "/sync/5",
        "/slow/6",
        "/sync/7",
        "/sync/8",
        "/sync/9",
    ]
    raw = await exchange(port, b"".join(get(p) for p in paths) + get("/last", "Connection: close\r\n"))
    assert re.findall(rb"X-Path: (\S+)", raw) == [p.encode() for p in [*paths, "/last"]]
    assert recorder.seen == [*paths, "/last"]  # each handled once, in order (reading paused at 4 waiting)


async def test_answer_format(served: tuple[HTTPServer, Recorder, int]) -> None:
    _, _, port = served
    raw = await exchange(port, get("/sync/a", "Connection: close\r\n"))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nContent-Length: 7\r\n" in head + b"\r\n" and body == b"/sync/a"
    assert re.search(rb"\r\nDate: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", head)
    assert b"Connection: close" in head and b"Server:" not in head


async def test_head_has_no_body_and_http10_closes_unless_asked(
    served: tuple[HTTPServer, Recorder, int],
) -> None:
    _, _, port = served
    raw = await exchange(port, b"HEAD /sync/h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert raw.endswith(b"\r\n\r\n") and b"Content-Length: 7" in raw  # length of the GET answer, no body
    assert statuses(await exchange(port, b"GET /sync/x HTTP/1.0\r\n\r\n")) == [200]  # closed after one
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(2):  # 1.0 with keep-alive: the connection stays for a second request
            writer.write(b"GET /sync/k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            assert b"Connection: keep-alive" in head
            await reader.readexactly(7)
    finally:
        writer.close()


async def test_expect_continue(served: tuple[HTTPServer, Recorder, int]) -> None:
    _, recorder, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /sync/e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"ping")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert head.startswith(b"HTTP/1.1 200 ") and await reader.readexactly(4) == b"ping"
    finally:
        writer.close()
    # too large: 413 at once, no 100, the handler never runs
    raw = await exchange(
        port, b"POST /sync/big HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n"
    )
    assert statuses(raw) == [413] and b"100 Continue" not in raw
    assert "/sync/big" not in recorder.seen and recorder.refused_with == [("/sync/big", 413)]


async def test_chunked_bodies_and_the_cap(served: tuple[HTTPServer, Recorder, int]) -> None:
    _, recorder, port = served
    body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    raw = await exchange(
        port,
        b"POST /sync/c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body,
    )
    assert raw.endswith(b"\r\n\r\nhello world")
    big = b"400\r\n" + b"x" * 1024 + b"\r\n0\r\n\r\n"  # 1,024 > max_body 1,000
    raw = await exchange(
        port, b"POST /sync/cb HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + big
    )
    assert statuses(raw) == [413] and ("/sync/cb", 413) in recorder.refused_with


def post(
    extra: bytes, body: bytes = b"{}", *, host: bytes = b"Host: x\r\n", version: bytes = b"1.1"
) -> bytes:
    head = b"POST /sync/p HTTP/" + version + b"\r\n" + host + extra
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def chunked(te_lines: bytes) -> bytes:
    return b"POST /sync/c HTTP/1.1\r\nHost: x\r\n" + te_lines + b"\r\n2\r\n{}\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        pytest.param(
            b"POST /sync/u HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n{}",
            400,
            id="upgrade",
        ),
        pytest.param(b"BREW / HTTP/1.1\r\n\r\n", 400, id="unknown-method"),
        pytest.param(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414, id="long-url"),
        pytest.param(b"GET / HTTP/1.1\nHost: x\n\n", 400, id="bare-lf"),
        pytest.param(post(b"", host=b""), 400, id="no-host"),
        pytest.param(post(b"", host=b"Host: a\r\nhost: a\r\n"), 400, id="two-hosts"),
        pytest.param(chunked(b"Transfer-Encoding: gzip, chunked\r\n"), 501, id="gzip-chunked"),
        pytest.param(
            chunked(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"), 400, id="two-te"
        ),
        pytest.param(chunked(b"Transfer-Encoding: chunked, chunked\r\n"), 400, id="chunked-twice"),
        pytest.param(chunked(b"Transfer-Encoding: chunked, gzip\r\n"), 400, id="chunked-not-last"),
        pytest.param(post(b"Expect: 200-ok\r\n"), 417, id="expect-200-ok"),
        pytest.param(post(b"X-Big: " + b"a" * 8190 + b"\r\n"), 431, id="header-line-over-8190"),
        pytest.param(post(b"".join(b"X-%d: v\r\n" % i for i in range(128))), 431, id="129-headers"),
    ],
)
async def test_bad_requests_are_refused_and_closed(
    served: tuple[HTTPServer, Recorder, int], request_bytes: bytes, status: int
) -> None:
    _, recorder, port = served
    raw = await exchange(port, request_bytes + get("/sync/after"))  # nothing after a bad request is read
    assert statuses(raw) == [status] and b"Connection: close" in raw
    assert recorder.seen == []


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(post(b"", host=b"", version=b"1.0"), id="http10-without-host"),
        pytest.param(post(b"", host=b"Host:\r\n"), id="empty-host"),
        pytest.param(post(b"Expect: 100-CONTINUE\r\n"), id="expect-any-case"),
        pytest.param(chunked(b"Transfer-Encoding: Chunked\r\n"), id="chunked-any-case"),
        pytest.param(post(b"X-Big: " + b"a" * 8180 + b"\r\n"), id="header-line-8190"),
        pytest.param(post(b"".join(b"X-%d: v\r\n" % i for i in range(125))), id="128-headers"),
    ],
)
async def test_requests_at_the_limits_are_answered(
    served: tuple[HTTPServer, Recorder, int], request_bytes: bytes
) -> None:
    _, _, port = served
    raw = await exchange(port, request_bytes.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n", 1))
    if b"HTTP/1.0" not in request_bytes and b"Connection: close" not in raw:
        raw += await exchange(port, get("/sync/z", "Connection: close\r\n"))
    assert next(s for s in statuses(raw) if s != 100) == 200, raw[:200]


async def test_an_endless_header_is_431_after_a_line_and_a_slice() -> None:
    """A header value streamed without end, in pieces of every size: refused once its line is past
    max_line plus one parser slice, never buffered further (llhttp's binding would concatenate it all)."""
    recorder = Recorder()
    server = HTTPServer(recorder, ServerLimits(max_body=1000, header_timeout=10.0))
    port = await server.start("127.0.0.1", 0)
    try:
        await _stream_endless_headers(port)
    finally:
        await server.stop(grace=0.2)
    assert recorder.seen == []


async def _stream_endless_headers(port: int) -> None:
    for piece in (1, 100, 4096, 65536):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answer = asyncio.create_task(reader.read())
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        sent = 0
        try:
            async with asyncio.timeout(5):
                while sent < 1 << 20 and not answer.done():
                    writer.write(b"a" * piece)
                    await writer.drain()
                    sent += piece
                    await asyncio.sleep(0)
                raw = await answer
        except ConnectionError:
            raw = b""
        finally:
            answer.cancel()
            writer.close()
        assert statuses(raw) == [431], (piece, sent, raw[:100])
        assert sent < 1 << 20, (piece, sent)  # answered long before (the kernel's buffers took some of it)


async def test_a_failing_handler_is_500_without_details(
    served: tuple[HTTPServer, Recorder, int], caplog: pytest.LogCaptureFixture
) -> None:
    _, _, port = served
    raw = await exchange(port, get("/boom") + get("/sync/ok", "Connection: close\r\n"))
    assert statuses(raw) == [500, 200]  # the connection goes on
    assert b"secret-token" not in raw
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


async def test_client_leaving_lets_its_answer_finish_or_is_reported(
    served: tuple[HTTPServer, Recorder, int],
) -> None:
    """A client that leaves while its answer is made: the handler finishes (as Go's and aiohttp's default),
    its answer is dropped; one that leaves mid-body is reported as 499."""
    server, recorder, port = served
    recorder.delay = 0.3
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(get("/slow/gone"))
    await writer.drain()
    await _until(lambda: bool(recorder.seen))
    reset(writer)
    await _until(lambda: bool(server.detached))
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /sync/half HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    await _until(lambda: not server.detached and bool(recorder.refused_with))
    assert recorder.cancelled == []
    assert recorder.refused_with == [("/sync/half", 499)]


async def test_past_max_detached_a_left_answer_is_cancelled() -> None:
    recorder = Recorder(delay=5.0)
    server = HTTPServer(recorder, ServerLimits(max_body=1000, max_detached=1))
    port = await server.start("127.0.0.1", 0)
    try:
        for i in range(2):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(get(f"/slow/{i}"))
            await writer.drain()
            await _until(partial(lambda n: len(recorder.seen) > n, i))
            reset(writer)
        await _until(lambda: recorder.cancelled == ["/slow/1"])
        assert len(server.detached) == 1
    finally:
        await server.stop(grace=0.2)
    assert recorder.cancelled == ["/slow/1", "/slow/0"]  # stop cancels it after the grace
    assert not server.detached


async def test_a_half_closed_client_gets_its_answers(served: tuple[HTTPServer, Recorder, int]) -> None:
    _, _, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(get("/slow/1") + get("/sync/2"))
    writer.write_eof()
    raw = await asyncio.wait_for(reader.read(), 3)
    writer.close()
    assert re.findall(rb"X-Path: (\S+)", raw) == [b"/slow/1", b"/sync/2"]


async def test_100_continue_follows_the_earlier_answers(served: tuple[HTTPServer, Recorder, int]) -> None:
    """The 100 of a pipelined request waits for the answers before it (issue 23 item 16)."""
    _, recorder, port = served
    recorder.delay = 0.2
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            get("/slow/1") + get("/sync/2") + b"POST /sync/3 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: 4\r\n\r\n"
        )
        seen: list[int] = []
        async with asyncio.timeout(3):
            while len(seen) < 3:
                head = await reader.readuntil(b"\r\n\r\n")
                seen.append(statuses(head)[0])
                if seen[-1] == 200:
                    await reader.readexactly(int(re.findall(rb"Content-Length: (\d+)", head)[0]))
            writer.write(b"ping")
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(statuses(head)[0])
    finally:
        writer.close()
    assert seen == [200, 200, 100, 200]


async def test_a_refused_request_is_answered_after_the_earlier_ones(
    served: tuple[HTTPServer, Recorder, int],
) -> None:
    _, recorder, port = served
    raw = await exchange(port, get("/slow/1") + get("/sync/2") + b"GET /x HTTP/1.1\r\n\r\n" + get("/sync/4"))
    assert statuses(raw) == [200, 200, 400] and raw.endswith(b"Connection: close\r\n\r\n")
    assert recorder.seen == ["/slow/1", "/sync/2"] and recorder.cancelled == []


async def test_pipelining_is_parsed_only_up_to_the_limit(served: tuple[HTTPServer, Recorder, int]) -> None:
    """One write of 2,000 pipelined requests while the first is answered on a task: the server parses only
    max_pipelined (4) plus one small slice of them, not the whole read (issue 23 item 7), then all in order."""
    server, recorder, port = served
    recorder.delay = 0.3
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(get("/slow/first") + get("/sync/n") * 1999)
        await _until(lambda: bool(recorder.seen))
        [connection] = server.connections
        most = 0
        while not recorder.seen[1:]:
            most = max(most, connection.waiting)
            await asyncio.sleep(0.01)
        assert 4 <= most <= 4 + 4096 // len(get("/sync/n")) + 1, most  # at most one read of 4 KiB past
        answers = 0
        async with asyncio.timeout(10):
            while answers < 2000:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(len("/slow/first") if answers == 0 else len("/sync/n"))
                answers += 1
    finally:
        writer.close()
    assert len(recorder.seen) == 2000


async def test_a_client_that_does_not_read_its_answers_is_closed() -> None:
    """write_timeout: answers backed up above the high-water mark for 0.5 s → the connection is aborted."""
    recorder = Recorder()
    server = HTTPServer(recorder, ServerLimits(max_body=1000, write_timeout=0.5))
    port = await server.start("127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        _, writer = await asyncio.open_connection(sock=sock)
        writer.write(get("/big") * 2000)  # 128 MB of answers
        await _until(lambda: bool(server.connections))
        start = loop.time()
        await _until(lambda: not server.connections, timeout=5)
        assert loop.time() - start < 3
        assert len(recorder.seen) < 2000
        writer.close()
    finally:
        await server.stop(grace=0.2)


def reset(writer: asyncio.StreamWriter) -> None:
    """Leave with a TCP reset (a plain close is a half-close: the server still answers)."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _until(check: Callable[[], bool], timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def test_timers(served: tuple[HTTPServer, Recorder, int]) -> None:
    """header_timeout 0.4 s: a silent client is closed; a connection that keeps sending is never closed
    while busy (the timer moves lazily); an idle one is closed after its last answer; a slow body is 400."""
    _, recorder, port = served
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await exchange(port, b"") == b""  # silent
    assert 0.35 <= loop.time() - start <= 1.5
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in range(12):  # 1.2 s of requests, 0.1 s apart: three header timeouts long
            writer.write(get(f"/sync/{i:02d}"))
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            await reader.readexactly(len(f"/sync/{i:02d}"))
            await asyncio.sleep(0.1)
        idle_from = loop.time()
        assert await asyncio.wait_for(reader.read(), 3) == b""  # then idle: closed
        assert 0.25 <= loop.time() - idle_from <= 1.5
    finally:
        writer.close()
    start = loop.time()
    raw = await exchange(port, b"POST /sync/slow-body HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")
    assert statuses(raw) == [400] and ("/sync/slow-body", 400) in recorder.refused_with
    assert 0.35 <= loop.time() - start <= 1.5


async def test_backpressure_from_a_client_that_does_not_read(
    served: tuple[HTTPServer, Recorder, int],
) -> None:
    """2,000 pipelined requests for 64 KiB answers from a client that reads nothing for a while: the server
    stops reading (it does not buffer 128 MB of answers), then answers everything."""
    server, recorder, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    one = get("/big")
    count = 2000

    async def send() -> None:
        for _ in range(count):
            writer.write(one)
        await writer.drain()

    sender = asyncio.create_task(send())
    await asyncio.sleep(0.5)
    handled_while_blocked = len(recorder.seen)
    assert handled_while_blocked < count  # paused: the answers fill the socket buffers, reading stopped
    received = 0
    async with asyncio.timeout(20):
        while received < count:
            await reader.readuntil(b"\r\n\r\n")
            assert await reader.readexactly(len(BIG)) == BIG
            received += 1
    await sender
    writer.close()
    assert len(recorder.seen) == count
    assert server.connections  # still open (keep-alive)


async def test_stop_lets_answers_finish_and_closes_idle_connections() -> None:
    recorder = Recorder(delay=0.3)
    server = HTTPServer(recorder, ServerLimits(max_body=1000))
    port = await server.start("127.0.0.1", 0)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    busy = asyncio.create_task(exchange(port, get("/slow/finishing")))
    for _ in range(100):
        if recorder.seen:
            break
        await asyncio.sleep(0.01)
    await server.stop(grace=2.0)
    raw = await busy
    assert statuses(raw) == [200] and b"Connection: close" in raw
    assert await asyncio.wait_for(idle_reader.read(), 2) == b""
    idle_writer.close()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)

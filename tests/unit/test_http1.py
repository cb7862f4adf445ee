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
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field

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


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(
            b"POST /sync/u HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n{}",
            id="upgrade",
        ),
        pytest.param(b"BREW / HTTP/1.1\r\n\r\n", id="unknown-method"),
        pytest.param(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", id="long-url"),
        pytest.param(b"GET / HTTP/1.1\nHost: x\n\n", id="bare-lf"),
    ],
)
async def test_bad_requests_are_400_and_closed(
    served: tuple[HTTPServer, Recorder, int], request_bytes: bytes
) -> None:
    _, recorder, port = served
    raw = await exchange(port, request_bytes + get("/sync/after"))  # nothing after a bad request is read
    assert statuses(raw) == [400] and b"Connection: close" in raw
    assert recorder.seen == []


async def test_a_failing_handler_is_500_without_details(
    served: tuple[HTTPServer, Recorder, int], caplog: pytest.LogCaptureFixture
) -> None:
    _, _, port = served
    raw = await exchange(port, get("/boom") + get("/sync/ok", "Connection: close\r\n"))
    assert statuses(raw) == [500, 200]  # the connection goes on
    assert b"secret-token" not in raw
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


async def test_client_leaving_cancels_its_task_or_is_reported(
    served: tuple[HTTPServer, Recorder, int],
) -> None:
    _, recorder, port = served
    recorder.delay = 5.0
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(get("/slow/gone"))
    await writer.drain()
    for _ in range(100):
        if recorder.seen:
            break
        await asyncio.sleep(0.01)
    writer.close()
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /sync/half HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    for _ in range(200):
        if recorder.cancelled and recorder.refused_with:
            break
        await asyncio.sleep(0.01)
    assert recorder.cancelled == ["/slow/gone"]
    assert recorder.refused_with == [("/sync/half", 499)]


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

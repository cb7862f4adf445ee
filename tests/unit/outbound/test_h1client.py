"""The direct HTTP/1.1 client (``outbound/h1client.py``) against real local servers: aiohttp's (HTTP and
HTTPS with a throw-away CA) and raw sockets for what aiohttp will not send (close-delimited bodies, interim
answers, a server that drops a kept connection)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from notification_controller.outbound.h1client import H1Client
from notification_controller.outbound.request import shared_headers
from notification_controller.outbound.transport import (
    ConnectError,
    Disconnected,
    DNSError,
    Exchange,
    InvalidHeader,
    InvalidResponse,
)
from tests.support.capture import mint_tls

LIMIT = 64 * 1024


async def aiohttp_server(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], tls: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.base_events.Server)
    return runner, server.sockets[0].getsockname()[1]


@pytest.fixture
async def client() -> AsyncIterator[H1Client]:
    c = H1Client()
    try:
        yield c
    finally:
        await c.close()


async def test_requests_answers_and_keep_alive(client: H1Client) -> None:
    peers: list[object] = []
    seen: list[tuple[str, str, str, bytes, str | None]] = []

    async def handle(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        body = await request.read()
        seen.append(
            (request.method, request.path_qs, request.headers["Host"], body, request.headers.get("X-A"))
        )
        return web.Response(status=201, body=b"created:" + body, headers={"X-Answer": "yes"})

    runner, port = await aiohttp_server(handle)
    try:
        for i in range(3):
            status, headers, body = await client.request(
                "POST",
                "http",
                "127.0.0.1",
                port,
                f"/p?i={i}",
                {"X-A": "1", "Content-Type": "text/plain"},
                b"hi%d" % i,
                body_limit=LIMIT,
            )
            assert (status, headers["X-Answer"], body) == (201, "yes", b"created:hi%d" % i)
        status, _, body = await client.request(
            "GET", "http", "127.0.0.1", port, "/g", [], b"", body_limit=LIMIT
        )
        assert (status, body) == (201, b"created:")
    finally:
        await runner.cleanup()
    assert [s[:4] for s in seen] == [
        ("POST", "/p?i=0", f"127.0.0.1:{port}", b"hi0"),
        ("POST", "/p?i=1", f"127.0.0.1:{port}", b"hi1"),
        ("POST", "/p?i=2", f"127.0.0.1:{port}", b"hi2"),
        ("GET", "/g", f"127.0.0.1:{port}", b""),
    ]
    assert len(set(peers)) == 1  # one connection, kept


async def test_connection_close_body_limit_and_chunked(client: H1Client) -> None:
    peers: list[object] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        if request.path == "/close":
            return web.Response(text="bye", headers={"Connection": "close"})
        if request.path == "/big":
            return web.Response(body=b"x" * (LIMIT * 4))
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b"one ", b"two ", b"three"):
            await response.write(part)
        await response.write_eof()
        return response

    runner, port = await aiohttp_server(handle)
    try:
        answers = [
            await client.request("GET", "http", "127.0.0.1", port, path, {}, b"", body_limit=LIMIT)
            for path in ("/close", "/chunked", "/big", "/chunked")
        ]
    finally:
        await runner.cleanup()
    assert [(a[0], a[2][:10], len(a[2])) for a in answers] == [
        (200, b"bye", 3),
        (200, b"one two th", 13),
        (200, b"x" * 10, LIMIT),  # capped; the connection is not reused
        (200, b"one two th", 13),
    ]
    assert peers[0] != peers[1] and peers[1] == peers[2] and peers[2] != peers[3]


async def raw_server(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> tuple[asyncio.Server, int]:
    """A server of raw bytes; every connection is closed when ``answer`` returns (no transport left to the
    garbage collector)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)
        finally:
            writer.transport.abort()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


async def test_interim_answers_and_close_delimited_bodies(client: H1Client) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nX-Old: 1\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    server, port = await raw_server(answer)
    async with server:
        status, headers, body = await client.request(
            "POST", "http", "127.0.0.1", port, "/", {}, b"{}", body_limit=LIMIT
        )
    assert (status, headers.get("X-Old"), body) == (200, "1", b"until the end")


async def test_a_dropped_kept_connection(client: H1Client) -> None:
    """The server takes the second request on a kept connection and closes without answering: an idempotent
    PUT is sent again on a new connection; a POST is not (the server may have acted on it)."""
    requests: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError):  # the client may close a kept one first
            requests.append(await read_request(reader))
        writer.transport.abort()  # the second request on this connection: dropped

    server, port = await raw_server(answer)
    async with server:
        assert (await client.request("PUT", "http", "127.0.0.1", port, "/", {}, b"1", body_limit=LIMIT))[
            0
        ] == 200
        assert (await client.request("PUT", "http", "127.0.0.1", port, "/", {}, b"2", body_limit=LIMIT))[
            0
        ] == 200
        # the retried PUT's answer came on a new connection, now kept; its second request is dropped again
        with pytest.raises((Disconnected, ConnectionResetError)):
            await client.request("POST", "http", "127.0.0.1", port, "/", {}, b"3", body_limit=LIMIT)
    assert [r.rsplit(b"\r\n\r\n", 1)[1] for r in requests] == [b"1", b"2", b"2", b"3"]


async def test_a_connection_the_server_closed_while_idle_is_not_reused(client: H1Client) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nKeep-Alive: timeout=5\r\n\r\n")
        await writer.drain()
        writer.close()  # closes right after, without saying Connection: close

    server, port = await raw_server(answer)
    async with server:
        for _ in range(3):
            assert (await client.request("POST", "http", "127.0.0.1", port, "/", {}, b"x", body_limit=LIMIT))[
                0
            ] == 200
            await asyncio.sleep(0.05)  # the FIN arrives: the connection is marked closed, never lent


async def test_errors(client: H1Client) -> None:
    """The Transport adapter translates the socket's errors into typed ones (``transport.py``)."""
    server, port = await raw_server(lambda r, w: asyncio.sleep(0))
    server.close()
    await server.wait_closed()

    def exchange(url: str, headers: dict[str, str] | None = None) -> Exchange:
        return Exchange("POST", url, headers or {}, b"", None, LIMIT)

    with pytest.raises(ConnectError) as refused:
        await client.send(exchange(f"http://127.0.0.1:{port}/"))
    assert refused.value.detail == "connection refused"
    with pytest.raises(DNSError):
        await client.send(exchange("http://host.invalid/"))
    with pytest.raises(InvalidHeader):
        await client.send(exchange("http://127.0.0.1:9/", {"X": "a\r\nInjected: 1"}))


async def test_tls_verified_with_the_given_context(client: H1Client) -> None:
    material = mint_tls()

    async def handle(request: web.Request) -> web.Response:
        return web.Response(text="secure")

    runner, port = await aiohttp_server(handle, material.server_context())
    try:
        trusted = material.client_context()
        status, _, body = await client.request(
            "GET", "https", material.hostname, port, "/", {}, b"", tls=trusted, body_limit=LIMIT
        )
        assert (status, body) == (200, b"secure")
        with pytest.raises(ssl.SSLCertVerificationError):  # the default trust store does not know this CA
            await client.request("GET", "https", material.hostname, port, "/", {}, b"", body_limit=LIMIT)
    finally:
        await runner.cleanup()


async def test_large_bodies_and_an_early_answer(client: H1Client) -> None:
    """A 3 MiB body arrives whole; a server that answers before reading an 8 MiB body leaves the connection
    out of step: it is not reused for the next request."""
    received: list[int] = []
    peers: list[object] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            if length > 4 << 20:  # too large: answer at once, keep the connection, read nothing for a while
                writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.5)
                writer.transport.abort()
                return
            received.append(len(await reader.readexactly(length)))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()

    server, port = await raw_server(answer)
    async with server:
        big = await client.request(
            "POST", "http", "127.0.0.1", port, "/", {}, b"x" * (3 << 20), body_limit=LIMIT
        )
        huge = await client.request(
            "POST", "http", "127.0.0.1", port, "/", {}, b"y" * (8 << 20), body_limit=LIMIT
        )
        after = await client.request("POST", "http", "127.0.0.1", port, "/", {}, b"z", body_limit=LIMIT)
    assert (big[0], huge[0], after[0]) == (200, 413, 200)
    assert received == [3 << 20, 1]
    assert len(set(peers)) == 2  # the first connection carried the 3 MiB and the 8 MiB; a new one after


async def test_idle_connections_are_reaped_by_a_timer_and_capped(client: H1Client) -> None:
    """Issue 23 item 11: idle connections were closed only when next looked at, so 1,000 stayed open. Here
    150 concurrent requests to 3 origins leave at most ``max_idle`` (40) open in all and ``max_idle_per_origin``
    (30) per origin, as the servers see them; with no further request, every one is closed once idle for
    ``idle_timeout`` (the servers see each close: no descriptor is left)."""
    reaping = H1Client(idle_timeout=0.5, max_idle=40, max_idle_per_origin=30)
    open_now = [0, 0, 0]

    def server_for(index: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            open_now[index] += 1
            try:
                while True:
                    await read_request(reader)
                    await asyncio.sleep(0.05)  # hold the connection so that the requests need many
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                open_now[index] -= 1

        return answer

    servers = [await raw_server(server_for(i)) for i in range(3)]
    try:

        async def get(port: int) -> int:
            status, _, _ = await reaping.request(
                "GET", "http", "127.0.0.1", port, "/", {}, b"", body_limit=LIMIT
            )
            return status

        statuses = await asyncio.gather(*(get(port) for _, port in servers for _ in range(50)))
        assert statuses == [200] * 150
        assert reaping.idle_connections <= 40
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while sum(open_now) > 40 and loop.time() < deadline:
            await asyncio.sleep(0.02)
        assert sum(open_now) <= 40 and max(open_now) <= 30, open_now
        assert sum(open_now) > 0  # not vacuous: connections were kept for reuse
        started = loop.time()
        while sum(open_now) and loop.time() < started + 5:  # no request from here on: only the timer
            await asyncio.sleep(0.02)
        assert open_now == [0, 0, 0], open_now
        assert reaping.idle_connections == 0
        assert loop.time() - started < 3
    finally:
        await reaping.close()
        for server, _ in servers:
            server.close()
            await server.wait_closed()


async def test_response_head_limits(client: H1Client) -> None:
    """Issue 23 item 3, the parts the transport battery does not reach: a flood of interim answers is bounded
    by the 1 MiB head budget of the exchange; a repeated field keeps its first value (nothing is joined)."""

    async def interim_flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for _ in range(4096):  # 4096 × 500 bytes = 2 MiB of 103 Early Hints, never a final answer
            writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: <" + b"l" * 460 + b">\r\n\r\n")
            await writer.drain()
            if writer.is_closing():
                return
        await asyncio.sleep(5)

    async def repeated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-R: first\r\nX-R: second\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read()

    server, port = await raw_server(interim_flood)
    async with server:
        with pytest.raises(InvalidResponse) as caught:
            async with asyncio.timeout(4):
                await client.request("GET", "http", "127.0.0.1", port, "/", {}, b"", body_limit=LIMIT)
    assert caught.value.problem == "header section too large"
    server, port = await raw_server(repeated)
    async with server:
        _, headers, _ = await client.request("GET", "http", "127.0.0.1", port, "/", {}, b"", body_limit=LIMIT)
    assert headers["X-R"] == "first"


async def test_a_shared_header_mapping_is_encoded_once_and_sent_as_given(client: H1Client) -> None:
    """A Provider's read-only headers (``shared_headers``) are merged and encoded once (issue 29), yet each
    request carries its own body, length, path and the headers of the mapping it was given: another mapping
    (a Secret changed: a new notifier) and a request without a body each get their own head."""
    seen: list[tuple[str, bytes, dict[str, str]]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.path_qs, await request.read(), dict(request.headers)))
        return web.Response(status=200)

    first = shared_headers({"Content-Type": "application/json", "X-Token": "one"})
    second = shared_headers({"Content-Type": "application/json", "X-Token": "two"})
    runner, port = await aiohttp_server(handle)
    try:
        for path, headers, body in [
            ("/a", first, b'{"n":1}'),
            ("/a", first, b'{"n":22}'),
            ("/b", first, b'{"n":3}'),
            ("/a", second, b'{"n":4}'),
            ("/a", first, b""),
        ]:
            url = f"http://127.0.0.1:{port}{path}"
            answer = await client.send(Exchange("POST", url, headers, body, None, LIMIT))
            assert answer.status == 200
    finally:
        await runner.cleanup()
    assert [(p, b, h.get("X-Token"), h.get("Content-Length")) for p, b, h in seen] == [
        ("/a", b'{"n":1}', "one", "7"),
        ("/a", b'{"n":22}', "one", "8"),
        ("/b", b'{"n":3}', "one", "7"),
        ("/a", b'{"n":4}', "two", "7"),
        ("/a", b"", "one", "0"),
    ]
    assert all(h["Content-Type"] == "application/json" and h["Accept"] == "*/*" for _, _, h in seen)

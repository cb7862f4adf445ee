"""One hostile-server battery against both outbound transports (issue 23 items 3, 13, 14).

``OutboundHTTP`` sends every request through its own HTTP/1.1 client (``h1client.py``; aiohttp carried the
proxied ones until issue 24, and this battery ran against both). A Provider's endpoint is chosen by the
tenant, so each case below is a raw ``asyncio`` server on 127.0.0.1 that misbehaves on purpose, reached
directly, through a local HTTP forward proxy (``tests.support.capture.ForwardProxy``: the absolute form for
these http URLs) and through a local SOCKS5 proxy (``tests.support.socks5``). On every path the outcome
(delivered or not), the
failure reason, the error text, the number of requests the server saw, the time and the memory must be the
same and bounded:

* endless response heads (one endless field value, endless distinct fields, one field repeated forever):
  refused at aiohttp's limits (8190 bytes a field, 128 fields), ``invalid_response``, RSS and CPU bounded;
* a 200 whose body is cut by a reset: delivered once, never sent again (the server answered);
* a reset with no answer at all: retried up to the policy's maximum on both;
* Secret headers: ``Content-Length``/``Transfer-Encoding``/``Host`` never reach the wire from the caller,
  NUL and non-ASCII values refused before anything is sent, with the same text;
* an early 413 to a 3 MiB body (direct path: a proxy reads the whole body itself): the next request reaches
  the server as a request, never behind the rest of the old body; two answers in one read: the next
  request goes on a fresh connection.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from notification_controller.errors import DeliveryError
from notification_controller.outbound import OutboundHTTP, OutboundRequest, RetryPolicy
from tests.support.capture import ForwardProxy
from tests.support.socks5 import Socks5Proxy

MiB = 1024 * 1024
ATTEMPTS = 3
TRANSPORTS = ["direct", "proxied", "socks"]

Handler = Callable[["RawServer", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@dataclass
class RawServer:
    """A raw HTTP/1.1 server on 127.0.0.1 whose answers ``handler`` writes by hand. It records every request
    head it read (``heads``) with the number of the connection it came on, and the connections still open."""

    handler: Handler
    heads: list[tuple[int, bytes]] = field(default_factory=list)
    connections: int = 0
    open: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def read_request(self, reader: asyncio.StreamReader, number: int, *, body: bool = True) -> int:
        """Read one request head (and its body unless ``body`` is False); return its Content-Length."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append((number, head))
        match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        length = int(match.group(1)) if match else 0
        if body and length:
            await reader.readexactly(length)
        return length

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        self.open += 1
        writer.transport.set_write_buffer_limits(high=256 * 1024)
        try:
            await self.handler(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        finally:
            self.open -= 1
            writer.transport.abort()
            self._tasks.discard(task)

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=8 * MiB)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


async def stream(writer: asyncio.StreamWriter, chunks: Callable[[int], bytes], cap: int = 64 * MiB) -> None:
    """Write ``chunks(i)`` until the client goes away, ``cap`` bytes or 15 s (the attack's own bound)."""
    sent = 0
    deadline = time.monotonic() + 15
    i = 0
    while sent < cap and time.monotonic() < deadline and not writer.is_closing():
        data = chunks(i)
        writer.write(data)
        await writer.drain()
        sent += len(data)
        i += 1


async def endless_value(
    server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await server.read_request(reader, server.connections)
    writer.write(b"HTTP/1.1 200 OK\r\nX-Endless: ")
    await stream(writer, lambda _: b"a" * 65536)


async def endless_distinct(
    server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await server.read_request(reader, server.connections)
    writer.write(b"HTTP/1.1 200 OK\r\n")
    block = 256
    await stream(writer, lambda i: b"".join(b"X-%d: v\r\n" % (i * block + j) for j in range(block)))


async def endless_repeated(
    server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await server.read_request(reader, server.connections)
    writer.write(b"HTTP/1.1 200 OK\r\n")
    await stream(writer, lambda _: b"Set-Cookie: a=b\r\n" * 4096)


async def cut_200(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await server.read_request(reader, server.connections)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
    await writer.drain()
    await asyncio.sleep(0.05)  # the head and the first bytes arrive, then the reset


async def reset_silently(
    server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await server.read_request(reader, server.connections)


async def answer_ok(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    number = server.connections
    while True:
        await server.read_request(reader, number)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()


async def early_413(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A server that answers a large body at once and keeps the connection without reading the body: what
    follows on the connection is parsed as the next request (as a naive server does)."""
    number = server.connections
    while True:
        length = await server.read_request(reader, number, body=False)
        if length > MiB:
            writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
        else:
            if length:
                await reader.readexactly(length)
            writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()


async def two_answers(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Every request gets two answers in one write: the second one belongs to no request."""
    number = server.connections
    while True:
        await server.read_request(reader, number)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            b"HTTP/1.1 299 Stale\r\nContent-Length: 5\r\n\r\nstale"
        )
        await writer.drain()


@dataclass
class Proxies:
    """The two kinds of proxy a Provider may name: an HTTP forward proxy and a SOCKS5 one."""

    forward: ForwardProxy
    socks: Socks5Proxy

    def url(self, transport: str) -> str | None:
        return {"direct": None, "proxied": self.forward.url, "socks": self.socks.url}[transport]


@pytest.fixture
async def proxy() -> AsyncIterator[Proxies]:
    async with ForwardProxy() as forward, Socks5Proxy() as socks:
        yield Proxies(forward, socks)


@pytest.fixture
async def http() -> AsyncIterator[OutboundHTTP]:
    client = OutboundHTTP(RetryPolicy(max_attempts=ATTEMPTS, wait_min=0.01, wait_max=0.02))
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def send(
    http: OutboundHTTP,
    proxy: Proxies,
    transport: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes = b"{}",
    timeout: float = 20,
) -> int:
    """POST through ``transport``; the answer's status (or the DeliveryError raised)."""
    response = await http.send(
        OutboundRequest("POST", url, headers or {"Content-Type": "application/json"}, body),
        timeout=timeout,
        proxy=proxy.url(transport),
    )
    return response.status


# ---- item 3: endless response heads ----------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("handler", "detail"),
    [
        (endless_value, "header field too long"),
        (endless_distinct, "too many header fields"),
        (endless_repeated, "too many header fields"),
    ],
    ids=["endless-value", "endless-distinct", "endless-repeated"],
)
async def test_endless_response_heads_are_refused_alike(
    http: OutboundHTTP, proxy: Proxies, transport: str, handler: Handler, detail: str
) -> None:
    async with RawServer(handler) as server:
        rss_before, cpu_before, started = rss(), time.process_time(), time.monotonic()
        with pytest.raises(DeliveryError) as caught:
            await send(http, proxy, transport, server.url + "/hook")
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu_before
        growth = rss() - rss_before
    assert caught.value.reason == "invalid_response", str(caught.value)
    assert str(caught.value).endswith(f": invalid response: {detail}"), str(caught.value)
    assert len(server.heads) == ATTEMPTS  # retried as any transport error, never beyond the policy
    assert elapsed < 10, f"{elapsed:.1f}s"
    assert cpu < 5, f"{cpu:.1f}s of CPU"
    assert growth < 64 * MiB, f"RSS grew by {growth / MiB:.0f} MiB"


# ---- item 13: one behaviour on both paths -------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_200_cut_by_a_reset_is_delivered_once(
    http: OutboundHTTP, proxy: Proxies, transport: str
) -> None:
    async with RawServer(cut_200) as server:
        assert await send(http, proxy, transport, server.url + "/hook") == 200
    assert len(server.heads) == 1, [h for _, h in server.heads]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_reset_without_any_answer_is_retried_alike(
    http: OutboundHTTP, proxy: Proxies, transport: str
) -> None:
    async with RawServer(reset_silently) as server:
        with pytest.raises(DeliveryError) as caught:
            await send(http, proxy, transport, server.url + "/hook")
    assert caught.value.reason == "connection"
    assert str(caught.value).endswith(": server closed the connection"), str(caught.value)
    assert len(server.heads) == ATTEMPTS


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_framing_and_host_headers_from_a_secret_are_the_transports(
    http: OutboundHTTP, proxy: Proxies, transport: str
) -> None:
    """Go's ``Request.Write``: Host comes from the URL, Content-Length from the body, and a Secret's
    ``Transfer-Encoding`` never reaches the wire (the body would be read as chunks: request smuggling)."""
    secret_headers = {
        "Content-Type": "application/json",
        "Host": "evil.example",
        "Content-Length": "5",
        "Transfer-Encoding": "chunked",
        "Trailer": "X-Late",
        "X-Token": "kept",
    }
    async with RawServer(answer_ok) as server:
        status = await send(http, proxy, transport, server.url + "/hook", headers=secret_headers, body=b"{}")
        host = server.url.removeprefix("http://")
    assert status == 200
    (_, head), *_ = server.heads
    text = head.decode("latin-1").lower()
    assert f"\r\nhost: {host}\r\n" in text and "evil.example" not in text, text
    assert "\r\ncontent-length: 2\r\n" in text and "content-length: 5" not in text, text
    assert "transfer-encoding" not in text and "trailer" not in text, text
    assert "\r\nx-token: kept\r\n" in text


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("value", ["a\x00b", "caf\u00e9", "\u20ac", "a\x7fb", "a\x01b"])
async def test_control_and_non_ascii_header_values_are_refused_alike(
    http: OutboundHTTP, proxy: Proxies, transport: str, value: str
) -> None:
    async with RawServer(answer_ok) as server:
        attempts = http.attempts
        with pytest.raises(DeliveryError) as caught:
            await send(http, proxy, transport, server.url + "/hook", headers={"X-Bad": value})
    assert caught.value.reason == "invalid_header"
    assert str(caught.value).endswith(
        ": header 'X-Bad' has a character HTTP does not allow in a request "
        "(control characters and non-ASCII are refused)"
    ), str(caught.value)
    assert value not in str(caught.value)
    assert http.attempts == attempts + 1  # permanent: not retried
    assert server.heads == []  # nothing was sent


# ---- item 14: a connection the server is out of step with is never reused ------------------------------


async def test_an_early_413_to_a_large_body_never_prefixes_the_next_request(
    http: OutboundHTTP, proxy: Proxies
) -> None:
    """Direct path only: through a proxy the client's peer is the proxy, which reads the whole body by its
    Content-Length (what it then sends upstream is its own connection's business; the test proxy, which
    pipes raw bytes after the first head, is no model of that)."""
    transport = "direct"
    async with RawServer(early_413) as server:
        with pytest.raises(DeliveryError) as caught:
            await send(http, proxy, transport, server.url + "/big", body=b"x" * (3 * MiB))
        assert caught.value.reason == "http_413"
        assert await send(http, proxy, transport, server.url + "/second") == 201
    firsts = [head.split(b"\r\n", 1)[0][:40] for _, head in server.heads]
    assert firsts == [b"POST /big HTTP/1.1", b"POST /second HTTP/1.1"], firsts


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_after_two_answers_in_one_read_the_next_request_goes_on_a_new_connection(
    http: OutboundHTTP, proxy: Proxies, transport: str
) -> None:
    async with RawServer(two_answers) as server:
        assert await send(http, proxy, transport, server.url + "/one") == 200
        assert await send(http, proxy, transport, server.url + "/two") == 200
    assert [number for number, _ in server.heads] == [1, 2]

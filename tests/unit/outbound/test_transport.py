"""The transport seam against REAL failing servers (issue 24 item 2): each adapter translates its own library's
exceptions into one typed ``transport.TransportError`` class, and ``OutboundHTTP`` turns that into a
``DeliveryError`` whose ``failure`` (``FailureReason``) and ``reason`` callers and the failure metric read.

Every failure is produced for real on 127.0.0.1: a port nothing listens on, a name under ``.invalid`` (RFC 6761:
never resolves), a self-signed certificate, a certificate for another name, an HTTP proxy that answers CONNECT
with 407 or 403, a proxy port nothing listens on, a listener whose accept queue is full (connect hangs), a
server that never answers, one that closes in the middle of its head and one in the middle of its body. Each
case runs on the direct client (``h1client.H1Client``) and, where a proxy is part of the path, on the proxied
one (``proxied.AiohttpTransport`` through ``tests.support.capture.ForwardProxy``).

Timers run on looptime's virtual clock: the connect timeout and the delivery budget are asserted in loop
seconds, and no test waits for them in real time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from notification_controller.errors import (
    DeliveryError,
    FailureReason,
    PermanentDeliveryError,
    RetryableDeliveryError,
)
from notification_controller.outbound import OutboundHTTP, OutboundRequest, RetryPolicy
from notification_controller.outbound.h1client import H1Client
from notification_controller.outbound.transport import (
    ConnectError,
    Disconnected,
    DNSError,
    Exchange,
    ProxyError,
    ProxyUnreachable,
    TLSVerificationError,
    TransportError,
    TransportTimeout,
)
from tests.support.capture import CaptureServer, ForwardProxy, mint_tls
from tests.support.pki import make_ca
from tests.support.socks5 import Socks5Proxy

pytestmark = pytest.mark.looptime

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
ONE = RetryPolicy(max_attempts=1)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def raw_server(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    """A raw server on 127.0.0.1 running ``handler`` per connection (closed after it); yields its port."""
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handler(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            tasks.discard(task)

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


@contextlib.contextmanager
def full_backlog() -> Iterator[int]:
    """A listener that never accepts, its accept queue filled: the kernel drops further SYNs, so a connect
    hangs (as to a host that does not answer) until the client's own timer gives up."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    try:
        for _ in range(4):
            sock = socket.socket()
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect(("127.0.0.1", port))
            fillers.append(sock)
        yield port
    finally:
        for sock in fillers:
            sock.close()
        listener.close()


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_head(reader)
    await asyncio.sleep(3600)  # virtual: the client's budget ends first


async def close_mid_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_head(reader)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")
    await writer.drain()


async def close_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_head(reader)
    writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 100\r\n\r\npartial")
    await writer.drain()


async def refuse_connect_403(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An HTTP proxy whose policy refuses the tunnel."""
    await read_head(reader)
    writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    await writer.drain()


async def transport_error(
    url: str, *, proxy: str | None = None, tls: ssl.SSLContext | None = None, connect_timeout: float = 30.0
) -> TransportError:
    """The error the transport raises for this exchange."""
    exchange = Exchange("POST", url, {"Content-Type": "application/json"}, b"{}", tls, 1 << 20, proxy)
    transport = H1Client(connect_timeout=connect_timeout)
    try:
        await transport.send(exchange)
    except TransportError as exc:
        return exc
    finally:
        await transport.close()
    raise AssertionError("no transport error")


async def delivery_error(
    url: str, *, proxy: str | None = None, tls: ssl.SSLContext | None = None, timeout: float = 5.0
) -> DeliveryError:
    http = OutboundHTTP(ONE)
    await http.start()
    try:
        await http.send(OutboundRequest("POST", url, {}, b"{}"), timeout=timeout, proxy=proxy, tls=tls)
    except DeliveryError as exc:
        return exc
    finally:
        await http.close()
    raise AssertionError("delivered")


def assert_failure(
    exc: DeliveryError, failure: FailureReason, reason: str, kind: type[DeliveryError]
) -> None:
    """``kind``: Retryable, Permanent, or the plain ``DeliveryError`` of a budget that ran out."""
    assert (exc.failure, exc.reason, type(exc)) == (failure, reason, kind), str(exc)


def self_signed_context() -> ssl.SSLContext:
    """A server context whose certificate signed itself (no CA anyone trusts)."""
    now = datetime.datetime.now(datetime.UTC)
    key, cert = make_ca(
        "self-signed.example", now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="self-signed-") as tmp:
        cert_path, key_path = Path(tmp, "c.pem"), Path(tmp, "k.pem")
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        ctx.load_cert_chain(cert_path, key_path)
    return ctx


# ---- no connection -----------------------------------------------------------------------------------------


async def test_a_refused_port_is_a_connect_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}/x"
    error = await transport_error(url)
    assert type(error) is ConnectError and error.detail == "connection refused"
    assert_failure(await delivery_error(url), FailureReason.CONNECTION, "connection", RetryableDeliveryError)


async def test_a_name_that_does_not_resolve_is_a_dns_error() -> None:
    url = "http://nonexistent.invalid/x"
    error = await transport_error(url)
    assert type(error) is DNSError
    assert_failure(await delivery_error(url), FailureReason.DNS, "dns", RetryableDeliveryError)


async def test_a_connect_that_hangs_is_the_transports_timeout_then_the_budgets() -> None:
    loop = asyncio.get_running_loop()
    with full_backlog() as port:
        url = f"http://127.0.0.1:{port}/x"
        start = loop.time()
        error = await transport_error(url, connect_timeout=7)
        assert type(error) is TransportTimeout
        assert loop.time() - start == pytest.approx(7, abs=0.01)  # the client's own connect timer
        start = loop.time()
        exc = await delivery_error(url, timeout=3)
        assert loop.time() - start == pytest.approx(3, abs=0.01)  # the delivery's budget, first
    assert_failure(exc, FailureReason.TIMEOUT, "timeout", DeliveryError)


# ---- TLS ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "connect-tunnel"])
async def test_a_self_signed_certificate_is_refused_and_not_retried(via_proxy: bool) -> None:
    async with raw_server(never_answer, tls=self_signed_context()) as port, ForwardProxy() as forward:
        url = f"https://127.0.0.1:{port}/x"
        proxy = forward.url if via_proxy else None
        error = await transport_error(url, proxy=proxy)
        assert type(error) is TLSVerificationError and "self-signed certificate" in error.detail
        exc = await delivery_error(url, proxy=proxy)
    assert_failure(exc, FailureReason.TLS, "tls_verification", PermanentDeliveryError)


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "connect-tunnel"])
async def test_a_certificate_for_another_name_is_refused_and_not_retried(via_proxy: bool) -> None:
    material = mint_tls("other.example")  # a trusted CA, the wrong name
    async with raw_server(never_answer, tls=material.server_context()) as port, ForwardProxy() as forward:
        url = f"https://127.0.0.1:{port}/x"
        proxy = forward.url if via_proxy else None
        error = await transport_error(url, proxy=proxy, tls=material.client_context())
        assert type(error) is TLSVerificationError and "mismatch" in error.detail.lower()
        exc = await delivery_error(url, proxy=proxy, tls=material.client_context())
    assert_failure(exc, FailureReason.TLS, "tls_verification", PermanentDeliveryError)


# ---- proxies -----------------------------------------------------------------------------------------------


async def test_a_proxy_answering_connect_with_407_is_a_proxy_error() -> None:
    async with ForwardProxy(require_auth=("user", "pass")) as forward:
        url = "https://origin.example:443/x"
        error = await transport_error(url, proxy=forward.url)
        assert type(error) is ProxyError and "407" in error.detail
        exc = await delivery_error(url, proxy=forward.url)
        assert forward.seen == ["origin.example:443", "origin.example:443"]  # CONNECT, then refused
    assert_failure(exc, FailureReason.PROXY, "proxy", RetryableDeliveryError)


async def test_a_proxy_answering_connect_with_403_is_a_proxy_error() -> None:
    async with raw_server(refuse_connect_403) as port:
        proxy = f"http://127.0.0.1:{port}"
        error = await transport_error("https://origin.example/x", proxy=proxy)
        assert type(error) is ProxyError and "403" in error.detail
        exc = await delivery_error("https://origin.example/x", proxy=proxy)
    assert_failure(exc, FailureReason.PROXY, "proxy", RetryableDeliveryError)


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_an_unreachable_proxy_is_proxy_unreachable(scheme: str) -> None:
    proxy = f"http://127.0.0.1:{closed_port()}"
    error = await transport_error(f"{scheme}://origin.example/x", proxy=proxy)
    assert type(error) is ProxyUnreachable
    exc = await delivery_error(f"{scheme}://origin.example/x", proxy=proxy)
    assert_failure(exc, FailureReason.PROXY, "connection", RetryableDeliveryError)


# ---- the server's side of the exchange ------------------------------------------------------------------------


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "proxied"])
async def test_a_server_that_never_answers_ends_at_the_budget(via_proxy: bool) -> None:
    loop = asyncio.get_running_loop()
    async with raw_server(never_answer) as port, ForwardProxy() as forward:
        start = loop.time()
        exc = await delivery_error(
            f"http://127.0.0.1:{port}/x", proxy=forward.url if via_proxy else None, timeout=4
        )
        assert loop.time() - start == pytest.approx(4, abs=0.01)
    assert_failure(exc, FailureReason.TIMEOUT, "timeout", DeliveryError)
    assert str(exc) == f"request to http://127.0.0.1:{port}/*** timed out after 4s"


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "proxied"])
async def test_a_server_closing_in_the_middle_of_its_head_is_disconnected(via_proxy: bool) -> None:
    async with raw_server(close_mid_head) as port, ForwardProxy() as forward:
        url = f"http://127.0.0.1:{port}/x"
        proxy = forward.url if via_proxy else None
        error = await transport_error(url, proxy=proxy)
        assert type(error) is Disconnected
        exc = await delivery_error(url, proxy=proxy)
    assert_failure(exc, FailureReason.CONNECTION, "connection", RetryableDeliveryError)


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "proxied"])
async def test_a_server_closing_in_the_middle_of_its_body_has_answered(via_proxy: bool) -> None:
    """The head came: the status stands (a 502 here, a 200 is delivered: the parity battery), with what
    arrived of the body; never a transport error that would resend a request the server acted on."""
    async with raw_server(close_mid_body) as port, ForwardProxy() as forward:
        exc = await delivery_error(f"http://127.0.0.1:{port}/x", proxy=forward.url if via_proxy else None)
    assert_failure(exc, FailureReason.SERVER_ERROR, "http_502", RetryableDeliveryError)
    assert (exc.status, exc.body) == (502, "partial")


# ---- one client through proxies: what goes on the wire, and the pool -------------------------------------------


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_https_through_an_http_proxy_is_a_connect_tunnel_with_the_proxy_credentials() -> None:
    """Go's and aiohttp's way: ``CONNECT host:port`` with ``Proxy-Authorization`` from the proxy URL's userinfo
    (percent-decoded), then TLS to the origin inside the tunnel with the Provider's context; the origin never
    sees the proxy's credentials."""
    material = mint_tls()
    async with CaptureServer(tls=material) as origin, ForwardProxy(require_auth=("user", "p@ss")) as forward:
        http = OutboundHTTP(ONE)
        tls = material.client_context()  # one context: the pool keys on it (and on the proxy URL)
        try:
            proxy = forward.url_with_auth("user", "p%40ss")
            for _ in range(2):
                response = await http.send(
                    OutboundRequest("POST", origin.url + "/x", {}, b"{}"),
                    timeout=10,
                    proxy=proxy,
                    tls=tls,
                )
                assert response.status == 200
        finally:
            await http.close()
        assert forward.seen == [f"127.0.0.1:{origin.port}"]  # one tunnel, reused for the second request
        assert forward.auth == [basic("user", "p@ss")]
        assert all("Proxy-Authorization" not in r.headers for r in origin.requests)
        assert len(origin.requests) == 2


async def test_http_through_an_http_proxy_is_the_absolute_form() -> None:
    async with CaptureServer() as origin, ForwardProxy(require_auth=("u", "pw")) as forward:
        http = OutboundHTTP(ONE)
        try:
            response = await http.send(
                OutboundRequest("POST", origin.url + "/x?a=1", {}, b"{}"),
                timeout=10,
                proxy=forward.url_with_auth("u", "pw"),
            )
        finally:
            await http.close()
    assert response.status == 200
    assert forward.seen == [f"{origin.url}/x?a=1"]  # the request line named the origin
    assert forward.auth == [basic("u", "pw")]


async def test_a_tunnel_is_never_lent_to_another_origin_or_another_proxy_or_a_direct_request() -> None:
    material = mint_tls()
    async with (
        CaptureServer(tls=material) as one,
        CaptureServer(tls=material) as two,
        ForwardProxy() as first,
        ForwardProxy() as second,
    ):
        http = OutboundHTTP(ONE)
        tls = material.client_context()
        try:
            for server, proxy in [(one, first), (two, first), (one, second), (one, None), (one, first)]:
                response = await http.send(
                    OutboundRequest("POST", server.url + "/x", {}, b"{}"),
                    timeout=10,
                    proxy=proxy.url if proxy else None,
                    tls=tls,
                )
                assert response.status == 200
        finally:
            await http.close()
        # the first proxy tunnelled to each origin once (the last request reused the first tunnel)
        assert first.seen == [f"127.0.0.1:{one.port}", f"127.0.0.1:{two.port}"]
        assert second.seen == [f"127.0.0.1:{one.port}"]
        assert len(one.requests) == 4 and len(two.requests) == 1


async def connect_then_junk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_head(reader)
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(3600)


async def close_during_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_head(reader)
    writer.write(b"HTTP/1.1 200 Conn")
    await writer.drain()


@pytest.mark.parametrize(
    ("handler", "detail", "retryable"),
    [
        (connect_then_junk, "the proxy sent bytes after its answer to CONNECT", False),
        (close_during_connect, "the proxy closed the connection during CONNECT", True),
    ],
    ids=["bytes-after-200", "closed-mid-answer"],
)
async def test_a_proxy_out_of_step_during_connect_is_a_proxy_error(
    handler: Handler, detail: str, retryable: bool
) -> None:
    async with raw_server(handler) as port:
        error = await transport_error("https://origin.example/x", proxy=f"http://127.0.0.1:{port}")
    assert type(error) is ProxyError and error.detail == detail and error.retryable is retryable


@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
async def test_socks5_and_socks5h_tunnel_with_the_name_resolved_by_the_proxy(scheme: str) -> None:
    async with CaptureServer() as origin, Socks5Proxy(require_auth=("user", "pw")) as socks:
        http = OutboundHTTP(ONE)
        try:
            url = f"http://localhost:{origin.port}/x"
            response = await http.send(
                OutboundRequest("POST", url, {}, b"{}"),
                timeout=10,
                proxy=f"{scheme}://user:pw@127.0.0.1:{socks.port}",
            )
        finally:
            await http.close()
    assert response.status == 200
    assert socks.targets == [f"localhost:{origin.port}"]  # the name, not an address: the proxy resolved it
    assert socks.credentials == [("user", "pw")]


async def test_a_socks_refusal_is_a_permanent_proxy_error_and_an_unreachable_one_is_retried() -> None:
    async with Socks5Proxy(require_auth=("user", "pw")) as socks:
        proxy = f"socks5://user:wrong@127.0.0.1:{socks.port}"
        error = await transport_error("http://origin.example/x", proxy=proxy)
        assert type(error) is ProxyError and not error.retryable
        exc = await delivery_error("http://origin.example/x", proxy=proxy)
    assert_failure(exc, FailureReason.PROXY, "proxy", PermanentDeliveryError)
    assert "wrong" not in str(exc)
    unreachable = f"socks5://127.0.0.1:{closed_port()}"
    assert type(await transport_error("http://origin.example/x", proxy=unreachable)) is ProxyUnreachable
    exc = await delivery_error("http://origin.example/x", proxy=unreachable)
    assert_failure(exc, FailureReason.PROXY, "connection", RetryableDeliveryError)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({}, basic("us er", "p@ss")), ({"Authorization": "Bearer t"}, "Bearer t")],
    ids=["from-the-url", "a-header-wins"],
)
async def test_credentials_in_the_url_are_basic_auth_unless_a_header_says(
    headers: dict[str, str], expected: str
) -> None:
    """Go's ``Request.Write`` (and aiohttp before): ``http://user:pass@host`` sends ``Authorization: Basic``
    of the percent-decoded userinfo when the request has no Authorization header; never the userinfo itself."""
    async with CaptureServer() as origin:
        http = OutboundHTTP(ONE)
        try:
            url = f"http://us%20er:p%40ss@127.0.0.1:{origin.port}/x"
            assert (await http.send(OutboundRequest("POST", url, headers, b"{}"), timeout=10)).status == 200
        finally:
            await http.close()
    [request] = origin.requests
    assert request.headers["Authorization"] == expected
    assert request.headers["Host"] == f"127.0.0.1:{origin.port}"

"""The one outbound path (``notification_controller/outbound``): failures as values, one budget, OIDC on it.

Real local servers: a capture server answering scripted statuses, a forward proxy, a local OIDC issuer.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from notification_controller.errors import DeliveryError, FailureReason, RetryableDeliveryError
from notification_controller.lib.clock import ManualClock
from notification_controller.outbound import Budget, OutboundHTTP, OutboundRequest, RetryPolicy
from notification_controller.receivers.oidc import OIDCClient
from tests.support.capture import CaptureServer, ForwardProxy, Reply
from tests.support.receiver_kit import LocalIssuer


@pytest.fixture
async def http() -> AsyncIterator[OutboundHTTP]:
    client = OutboundHTTP(RetryPolicy(max_attempts=1))
    await client.start()
    yield client
    await client.close()


@pytest.mark.parametrize(
    ("reply", "failure", "reason"),
    [
        (Reply(400, "bad channel"), FailureReason.CLIENT_ERROR, "http_400"),
        (Reply(429, "slow down", headers={"Retry-After": "7"}), FailureReason.RATE_LIMITED, "http_429"),
        (Reply(500, "oops"), FailureReason.SERVER_ERROR, "http_500"),
        (Reply(503, "later"), FailureReason.SERVER_ERROR, "http_503"),
    ],
)
async def test_an_answer_is_a_status_a_body_and_a_failure_reason(
    http: OutboundHTTP, reply: Reply, failure: FailureReason, reason: str
) -> None:
    async with CaptureServer() as server:
        server.script(reply)
        with pytest.raises(DeliveryError) as info:
            await http.send(OutboundRequest("POST", server.url + "/x", body=b"{}"), timeout=2)
    exc = info.value
    assert (exc.status, exc.failure, exc.reason) == (reply.status, failure, reason)
    assert exc.body == reply.body
    if reply.status == 429:
        assert isinstance(exc, RetryableDeliveryError) and exc.retry_after == 7.0


async def test_transport_failures_have_no_status(http: OutboundHTTP) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once the socket is closed
    with pytest.raises(DeliveryError) as info:
        await http.send(OutboundRequest("GET", f"http://127.0.0.1:{port}/"), timeout=2)
    assert (info.value.status, info.value.failure) == (None, FailureReason.CONNECTION)
    async with CaptureServer() as server:
        server.script(Reply(delay=2.0))
        with pytest.raises(DeliveryError) as info:
            await http.send(OutboundRequest("GET", server.url + "/slow"), timeout=0.3)
    assert (info.value.status, info.value.failure) == (None, FailureReason.TIMEOUT)


async def test_a_budget_is_shared_by_every_request_of_a_delivery(http: OutboundHTTP) -> None:
    """The second request gets what the first left: 0.6 s budget, first answer after 0.4 s → the second,
    answering after 0.4 s too, times out (each alone would fit)."""
    async with CaptureServer() as server:
        server.on("GET", "/list", Reply(200, [], delay=0.4))
        server.on("POST", "/create", Reply(201, {}, delay=0.4))
        budget = Budget(0.6)
        await http.send(OutboundRequest("GET", server.url + "/list"), timeout=budget.remaining("list"))
        left = budget.remaining("create")
        assert 0.05 < left < 0.25
        with pytest.raises(DeliveryError) as info:
            await http.send(OutboundRequest("POST", server.url + "/create"), timeout=left)
        assert info.value.failure is FailureReason.TIMEOUT
        await asyncio.sleep(left)
        with pytest.raises(DeliveryError, match=r"create: timed out after 0\.6s") as spent:
            budget.remaining("create")
        assert spent.value.failure is FailureReason.TIMEOUT


async def test_oidc_discovery_goes_out_the_outbound_path_and_its_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OIDC has no session of its own: discovery and keys honour HTTP(S)_PROXY like every provider."""
    async with ForwardProxy() as proxy, LocalIssuer() as issuer:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        http = OutboundHTTP(RetryPolicy(max_attempts=1))
        await http.start()  # reads the proxy environment once
        client = OIDCClient(ManualClock(), http=http)
        try:
            discovery = await client.discover(issuer.url)
            assert discovery.jwks_uri == issuer.jwks_url
        finally:
            await client.close()
            await http.close()
        assert any(seen.endswith("/.well-known/openid-configuration") for seen in proxy.seen), proxy.seen


async def test_direct_and_proxied_requests_put_the_same_headers_on_the_wire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a proxy a request goes through our HTTP/1.1 client (``h1client``), through a proxy through
    aiohttp's: the receiver sees the same headers either way (User-Agent, Accept, the caller's, one line per
    name with the last value winning), a URL's path and query encoded alike, and no Accept-Encoding (answers
    are not decompressed)."""
    headers = {"Content-Type": "application/json", "X-Token": "t", "x-token": "override"}
    url_path = "/hooks/a b/ü?q=x y&r=ü"
    async with CaptureServer() as server, ForwardProxy() as proxy:
        direct = OutboundHTTP(RetryPolicy(max_attempts=1))
        await direct.start()
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        proxied = OutboundHTTP(RetryPolicy(max_attempts=1))
        await proxied.start()  # reads the proxy environment once
        try:
            for client in (direct, proxied):
                await client.send(OutboundRequest("POST", server.url + url_path, headers, b"{}"), timeout=5)
        finally:
            await direct.close()
            await proxied.close()
        first, second = await server.wait_for(2)
    assert len(proxy.seen) == 1  # only the second went through the proxy
    for seen in (first, second):
        assert seen.headers.getall("X-Token") == ["override"]
        assert (seen.headers["User-Agent"], seen.headers["Accept"]) == ("notification-controller", "*/*")
        assert "Accept-Encoding" not in seen.headers
    assert first.raw_path == second.raw_path == "/hooks/a%20b/%C3%BC?q=x+y&r=%C3%BC"

"""The test servers themselves work: capture, scripted replies, resets, delays, TLS, mTLS, proxying."""

from __future__ import annotations

import asyncio
import ssl

import aiohttp
import pytest
from yarl import URL

from tests.support.capture import CapturedRequest, CaptureServer, ForwardProxy, Reply, mint_tls


async def test_captures_method_path_query_headers_body() -> None:
    async with CaptureServer() as srv, aiohttp.ClientSession() as session:
        async with session.post(
            URL(f"{srv.url}/a/b?x=1&y=%2F", encoded=True), data=b'{"k":"v"}', headers={"X-Test": "yes"}
        ) as resp:
            assert resp.status == 200
            assert await resp.json() == {}
        [req] = await srv.wait_for(1)
        assert req.method == "POST"
        assert req.path == "/a/b"
        assert req.query == {"x": "1", "y": "/"}
        assert req.raw_path == "/a/b?x=1&y=%2F"
        assert req.headers["x-test"] == "yes"
        assert req.json() == {"k": "v"}
        assert req.text() == '{"k":"v"}'


async def test_script_then_default_and_routes_win_without_being_consumed() -> None:
    async with CaptureServer() as srv, aiohttp.ClientSession() as session:
        srv.script(Reply(503, "busy"), Reply(201, {"ok": True}, headers={"X-A": "1"}))
        srv.on("GET", r"^/status$", Reply(204, b""))
        srv.on("*", r"^/dyn/", lambda r: Reply(200, {"path": r.path}))
        got = []
        for method, path in (
            ("GET", "/status"),
            ("POST", "/x"),
            ("GET", "/status"),
            ("POST", "/y"),
            ("POST", "/z"),
        ):
            async with session.request(method, srv.url + path) as resp:
                got.append((resp.status, await resp.read()))
        async with session.put(srv.url + "/dyn/q") as resp:
            assert await resp.json() == {"path": "/dyn/q"}
        assert got == [(204, b""), (503, b"busy"), (204, b""), (201, b'{"ok": true}'), (200, b"{}")]
        assert len(srv.requests) == 6


async def test_reset_closes_without_answer_and_delay_delays() -> None:
    async with CaptureServer() as srv, aiohttp.ClientSession() as session:
        srv.script(Reply(reset=True), Reply(delay=0.3))
        with pytest.raises(aiohttp.ClientError):
            async with session.post(srv.url + "/r") as resp:
                await resp.read()
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with session.post(srv.url + "/d") as resp:
            assert resp.status == 200
        assert loop.time() - start >= 0.3
        assert [r.path for r in srv.requests] == ["/r", "/d"]


async def test_wait_for_times_out_when_requests_do_not_come() -> None:
    async with CaptureServer() as srv:
        with pytest.raises(TimeoutError):
            await srv.wait_for(1, timeout=0.1)


async def test_delayed_reply_does_not_block_shutdown() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with CaptureServer() as srv, aiohttp.ClientSession() as session:
        srv.script(Reply(delay=30))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2), session.get(srv.url):
                pass
    assert loop.time() - start < 5


async def test_tls_server_trusted_only_with_the_ca() -> None:
    tls = mint_tls()
    async with CaptureServer(tls=tls) as srv, aiohttp.ClientSession() as session:
        assert srv.url.startswith("https://127.0.0.1:")
        async with session.get(srv.url + "/t", ssl=tls.client_context()) as resp:
            assert resp.status == 200
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with session.get(srv.url + "/t", ssl=ssl.create_default_context()):
                pass
        assert len(srv.requests) == 1


async def test_mtls_rejects_a_client_without_certificate() -> None:
    tls = mint_tls()
    async with CaptureServer(tls=tls, require_client_cert=True) as srv, aiohttp.ClientSession() as session:
        async with session.get(srv.url + "/m", ssl=tls.client_context(with_client_cert=True)) as resp:
            assert resp.status == 200
        with pytest.raises(aiohttp.ClientError):
            async with session.get(srv.url + "/m", ssl=tls.client_context()) as resp:
                await resp.read()
        assert [r.path for r in srv.requests] == ["/m"]


async def test_proxy_forwards_plain_http() -> None:
    async with CaptureServer() as srv, ForwardProxy() as proxy, aiohttp.ClientSession() as session:
        srv.script(Reply(202, {"via": "proxy"}))
        async with session.post(srv.url + "/p?q=1", data=b"hello", proxy=proxy.url) as resp:
            assert resp.status == 202
            assert await resp.json() == {"via": "proxy"}
        [req] = await srv.wait_for(1)
        assert req.raw_path == "/p?q=1"
        assert req.body == b"hello"
        assert "proxy-authorization" not in req.headers
        assert proxy.seen == [srv.url + "/p?q=1"]
        assert proxy.auth == [None]


async def test_proxy_tunnels_https_with_connect() -> None:
    tls = mint_tls()
    async with CaptureServer(tls=tls) as srv, ForwardProxy() as proxy, aiohttp.ClientSession() as session:
        async with session.post(srv.url + "/s", data=b"x", proxy=proxy.url, ssl=tls.client_context()) as resp:
            assert resp.status == 200
        [req] = await srv.wait_for(1)
        assert isinstance(req, CapturedRequest)
        assert req.body == b"x"
        assert proxy.seen == [f"127.0.0.1:{srv.port}"]


async def test_proxy_requires_auth_when_configured() -> None:
    async with (
        CaptureServer() as srv,
        ForwardProxy(require_auth=("alice", "s3cret")) as proxy,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(srv.url + "/a", proxy=proxy.url) as resp:
            assert resp.status == 407
        assert srv.requests == []
        async with session.get(srv.url + "/a", proxy=proxy.url_with_auth("alice", "s3cret")) as resp:
            assert resp.status == 200
        assert len(srv.requests) == 1
        assert proxy.auth[0] is None
        assert proxy.auth[1] == "Basic YWxpY2U6czNjcmV0"

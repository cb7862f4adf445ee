"""Provider endpoints that fail in every way we know (checklist E1–E7, E10, F3, F4; reference §3.6, §4.0).

The real controller (local mode) delivers one event to a dozen broken Providers and one healthy Provider:
each failure is bounded (attempts ≤ the policy's maximum, time ≤ ``spec.timeout``), classified (the
``reason`` label of ``notification_delivery_failed_total``), and recorded as a Warning
``NotificationDispatchFailed`` Event on its Alert whose message carries no token, header value or webhook path,
while the healthy Provider gets its notifications at once. A second test runs 500 failing deliveries and
checks that tasks and traced memory come back to their baseline. The rest drives ``OutboundHTTP`` (the one
outbound path) directly against local servers: redirects, oversized and gzip-bomb bodies, ``Retry-After``,
URL redaction in transport errors.

Pinned: connection refused / reset / DNS failure → retried, ``connection``/``dns``; 5xx → retried,
``http_5xx``; 429 with a ``Retry-After`` that fits the budget → waited, then delivered; one that does not
fit → given up at once, ``http_429``; slow → cut at ``spec.timeout``, ``timeout``; self-signed TLS without
a CA → not retried, ``tls_verification``; same-host redirect loop → ``redirect_loop`` after 10 hops;
redirect to another host or port (169.254.169.254 included) → not followed, ``redirect_refused``.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import logging
import socket
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest
from aiohttp import web

from notification_controller.app import App
from notification_controller.errors import DeliveryError
from notification_controller.outbound import OutboundHTTP, OutboundRequest, RetryPolicy
from notification_controller.settings import EventSettings
from tests.adversarial.kit import event_body, eventually, pair, secret
from tests.integration.appkit import FAST_RETRY, local_cluster, metric, post_event, running_app
from tests.support.capture import CapturedRequest, CaptureServer, Reply, mint_tls

CANARY = "CANARY-hdr-5f1e0b"  # a header value from the Provider's Secret (masked everywhere)
PATH_CANARY = "CANARY-path-77c2aa"  # a token in the webhook address path (masked / redacted)
FAILED = "notification_delivery_failed_total"
MiB = 1024 * 1024


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class BigBodyServer:
    """Answers ``status`` with a streamed body of ``size`` bytes (or a gzip bomb); counts bytes it wrote."""

    status: int = 500
    size: int = 100 * MiB
    bomb: bytes | None = None
    written: list[int] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    port: int = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if self.bomb is not None:
            self.written.append(len(self.bomb))
            return web.Response(status=self.status, body=self.bomb, headers={"Content-Encoding": "gzip"})
        response = web.StreamResponse(status=self.status)
        response.content_length = self.size
        await response.prepare(request)
        block = b"E" * 65536 if not self.written else b"x" * 65536
        sent = 0
        try:
            while sent < self.size:
                await response.write(block)
                sent += len(block)
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self.written.append(sent)
        return response

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


GZIP_BOMB = gzip.compress(b"\0" * (50 * MiB), compresslevel=9)


def echo_secrets(request: CapturedRequest) -> Reply:
    """A provider that echoes what it was sent: the token-bearing header and path (checklist F4)."""
    return Reply(500, body=f"bad auth {request.headers.get('Authorization')} on {request.path}")


def then_ok(first: Reply) -> Callable[[CapturedRequest], Reply]:
    calls = {"n": 0}

    def reply(_: CapturedRequest) -> Reply:
        calls["n"] += 1
        return first if calls["n"] == 1 else Reply(200)

    return reply


@dataclass
class Servers:
    healthy: CaptureServer
    faulty: CaptureServer
    other: CaptureServer
    tls: CaptureServer
    huge: BigBodyServer
    bomb: BigBodyServer


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    async with (
        CaptureServer() as healthy,
        CaptureServer() as faulty,
        CaptureServer() as other,
        CaptureServer(tls=mint_tls()) as tls,
        BigBodyServer() as huge,
        BigBodyServer(status=502, bomb=GZIP_BOMB) as bomb,
    ):
        faulty.on("*", "^/p500/", echo_secrets)
        faulty.on("*", "^/reset/", Reply(reset=True))
        faulty.on("*", "^/p429-long/", Reply(429, headers={"Retry-After": "3600"}))
        faulty.on("*", "^/p429-short/", then_ok(Reply(429, headers={"Retry-After": "1"})))
        faulty.on("*", "^/slow/", Reply(delay=30))
        faulty.on("*", "^/loop/", Reply(302, headers={"Location": f"/loop/{PATH_CANARY}"}))
        faulty.on("*", "^/offhost/", Reply(307, headers={"Location": f"{other.url}/stolen/{PATH_CANARY}"}))
        faulty.on(
            "*", "^/metadata/", Reply(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})
        )
        yield Servers(healthy, faulty, other, tls, huge, bomb)


# name → (address, expected failure reason or None if it must end up delivered)
def faults(s: Servers) -> dict[str, tuple[str, str | None]]:
    return {
        "refused": (f"http://127.0.0.1:{closed_port()}", "connection"),
        "reset": (s.faulty.url + "/reset", "connection"),
        "p500": (s.faulty.url + "/p500", "http_500"),
        "p429-long": (s.faulty.url + "/p429-long", "http_429"),
        "p429-short": (s.faulty.url + "/p429-short", None),
        "slow": (s.faulty.url + "/slow", "timeout"),
        "tls": (s.tls.url, "tls_verification"),
        "dns": ("http://does-not-exist.invalid", "dns"),
        "loop": (s.faulty.url + "/loop", "redirect_loop"),
        "offhost": (s.faulty.url + "/offhost", "redirect_refused"),
        "metadata": (s.faulty.url + "/metadata", "redirect_refused"),
        "huge": (s.huge.url, "http_500"),
        "bomb": (s.bomb.url, "http_502"),
    }


def manifests(tmp: Path, s: Servers) -> Path:
    docs = [
        pair(
            "healthy", "generic", f"{s.healthy.url}/ok/{PATH_CANARY}", secret="creds", extra="\n  timeout: 2s"
        )
    ]
    for name, (address, _) in faults(s).items():
        docs.append(
            pair(name, "generic", f"{address}/{PATH_CANARY}", secret="creds", extra="\n  timeout: 2s")
        )
    docs.append(secret("creds", headers=f"Authorization: Bearer {CANARY}"))
    (tmp / "objects.yaml").write_text("".join(docs))
    return tmp


async def test_every_fault_is_bounded_classified_evented_and_masked(
    tmp_path: Path, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    s = servers
    async with running_app(manifests(tmp_path, s)) as app:
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert (await post_event(app, event_body("first"))).status == 202
        await s.healthy.wait_for(1, timeout=2)
        healthy_latency = loop.time() - start
        for i in range(3):  # while the broken Providers retry, hang and time out, the healthy one is prompt
            sent = loop.time()
            assert (await post_event(app, event_body(f"next {i}"))).status == 202
            await s.healthy.wait_for(2 + i, timeout=2)
            assert loop.time() - sent < 1.0
        assert healthy_latency < 1.0
        assert await app.dispatcher.wait_idle(10)
        elapsed = loop.time() - start

    expected = faults(s)
    # every delivery ended within spec.timeout (2 s) plus scheduling slack, all in parallel
    assert elapsed < 4.5
    # ---- bounded attempts, as seen by the servers (four events, so four deliveries per Provider)
    n = 4
    by_path: dict[str, int] = {}
    for request in s.faulty.requests:
        first = request.path.split("/")[1]
        by_path[first] = by_path.get(first, 0) + 1
    assert by_path["p500"] == n * FAST_RETRY.max_attempts  # retried up to the maximum, not beyond
    assert by_path["reset"] == n * FAST_RETRY.max_attempts
    assert by_path["p429-long"] == n  # Retry-After beyond the budget: give up at once, no tight loop
    assert by_path["p429-short"] == n + 1  # the first delivery waited as asked (1 s), then every one passed
    assert by_path["slow"] == n  # the first attempt used the whole budget
    assert by_path["loop"] == n * 11  # the request and 10 redirects, never more
    assert by_path["offhost"] == n and by_path["metadata"] == n
    assert s.other.requests == []  # E7: the other host never saw the (authenticated) request
    assert s.tls.requests == []  # no handshake, not retried
    assert len(s.huge.written) == n * FAST_RETRY.max_attempts
    assert all(w < 32 * MiB for w in s.huge.written), s.huge.written  # the client stopped reading early
    assert len(s.bomb.written) == n * FAST_RETRY.max_attempts
    # ---- metrics: one failure per broken Provider, by reason
    reasons: dict[str, int] = {}
    for _, reason in expected.values():
        if reason is not None:
            reasons[reason] = reasons.get(reason, 0) + n
    for reason, count in reasons.items():
        assert metric(app, FAILED, provider_type="generic", reason=reason) == count, reason
    assert (
        metric(app, "notification_delivered_total", provider_type="generic") == n + n
    )  # healthy + p429-short
    # ---- one Warning per broken Alert (the recorder aggregates identical repeats), masked
    warnings = [e for e in local_cluster(app).events if e[2] == "NotificationDispatchFailed"]
    failing = {name for name, (_, reason) in expected.items() if reason is not None}
    assert {ref.name for ref, *_ in warnings} == failing
    for _, type_, _, message in warnings:
        assert type_ == "Warning"
        assert message.startswith("failed to send notification for Kustomization/flux-system/apps: "), message
        assert CANARY not in message and PATH_CANARY not in message, message
        assert len(message) < 2048
    texts = {ref.name: message for ref, _, _, message in warnings}
    assert "status code 500" in texts["p500"] and "bad auth" in texts["p500"]  # the echo is kept, masked
    assert "*****" in texts["p500"]
    assert "timed out after 2s" in texts["slow"]
    assert "another host" in texts["offhost"] and "169.254.169.254" in texts["metadata"]
    assert "redirects" in texts["loop"]
    # ---- logs: failed deliveries at error (Flux's level, issue 16), never a traceback, no secret at any level
    failed = [r for r in caplog.records if r.getMessage().startswith("failed to send notification")]
    assert failed and all(r.levelno == logging.ERROR for r in failed)
    for record in caplog.records:
        text = record.getMessage()
        assert CANARY not in text and PATH_CANARY not in text, text
        assert record.levelno <= logging.ERROR, text
        assert record.exc_info is None


@pytest.mark.slow
async def test_500_failing_deliveries_leak_no_tasks_and_no_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """E4/E5: after 500 failed deliveries (5 attempts each) the task count is back to its baseline and the
    traced memory grew by less than 1 MiB (a leak of per-delivery state would cost several MiB)."""
    caplog.set_level(logging.CRITICAL)  # the test measures memory: keep log records out of pytest's capture
    (tmp_path / "objects.yaml").write_text(
        pair("down", "generic", f"http://127.0.0.1:{closed_port()}/x", extra="\n  timeout: 5s")
    )
    async with running_app(tmp_path, events=EventSettings(provider_concurrency=64)) as app:
        for i in range(50):  # warm-up: caches, pools, metric label sets
            assert (await post_event(app, event_body(f"warm-up {i}"))).status == 202
        assert await app.dispatcher.wait_idle(30)
        baseline_tasks = len(asyncio.all_tasks())
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            await asyncio.gather(*(_post_ok(app, i) for i in range(500)))
            assert await app.dispatcher.wait_idle(60)
            await eventually(
                lambda: len(asyncio.all_tasks()) <= baseline_tasks, what="tasks back to baseline"
            )
            gc.collect()
            growth = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert metric(app, FAILED, provider_type="generic", reason="connection") == 550
        assert app.dispatcher.queue.pending == 0
    assert growth < 1 * MiB, f"traced memory grew by {growth / MiB:.2f} MiB"


async def _post_ok(app: App, i: int) -> None:
    assert (await post_event(app, event_body(f"event {i}"))).status == 202


# ---- the outbound path directly ---------------------------------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[OutboundHTTP]:
    client = OutboundHTTP(RetryPolicy(max_attempts=3, wait_min=0.01, wait_max=0.02))
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def test_transport_errors_never_carry_the_url_path(http: OutboundHTTP) -> None:
    """F3 / issue 7 "URLs redacted in errors": aiohttp's ClientConnectorError (and an invalid URL) become a
    DeliveryError naming scheme, host and port only — even with no masks given."""
    port = closed_port()
    url = f"http://127.0.0.1:{port}/services/T000/B000/{PATH_CANARY}?token={CANARY}"
    with pytest.raises(DeliveryError) as caught:
        await http.send(OutboundRequest("POST", url, {"Authorization": f"Bearer {CANARY}"}), timeout=5)
    text = str(caught.value)
    assert text == f'POST "http://127.0.0.1:{port}/***": connection refused'  # user words, no class name
    assert PATH_CANARY not in text and CANARY not in text
    assert caught.value.reason == "connection"
    assert (
        caught.value.__cause__ is None and caught.value.__context__ is not None
    )  # `from None`: no chain print

    attempts = http.attempts
    with pytest.raises(DeliveryError) as caught:
        await http.send(OutboundRequest("POST", f"http://[::1/{PATH_CANARY}"), timeout=5)
    assert PATH_CANARY not in str(caught.value)
    assert caught.value.reason == "invalid_url"
    assert http.attempts == attempts + 1  # permanent: not retried


async def test_redirects_stay_on_the_same_origin(http: OutboundHTTP) -> None:
    """E7 / issue 7 "Outbound": a 307 to the same origin is followed with the credentials; one to another
    port of the same host is refused before any byte reaches it."""
    async with CaptureServer() as origin, CaptureServer() as elsewhere:
        origin.on("*", "^/move$", Reply(307, headers={"Location": "/moved"}))
        origin.on("*", "^/leak$", Reply(308, headers={"Location": f"{elsewhere.url}/x"}))
        request = OutboundRequest("POST", origin.url + "/move", {"Authorization": f"Bearer {CANARY}"}, b"{}")
        assert (await http.send(request, timeout=5)).status == 200
        assert [r.path for r in origin.requests] == ["/move", "/moved"]
        assert (
            origin.requests[1].headers["Authorization"] == f"Bearer {CANARY}"
            and origin.requests[1].body == b"{}"
        )

        with pytest.raises(DeliveryError) as caught:
            await http.send(
                OutboundRequest("POST", origin.url + "/leak", {"Authorization": f"Bearer {CANARY}"}),
                timeout=5,
            )
        assert caught.value.reason == "redirect_refused"
        assert elsewhere.requests == []
        assert http.attempts == 2  # permanent: not retried


@pytest.mark.parametrize("kind", ["100MB", "gzip-bomb"])
async def test_response_bodies_are_read_at_most_64k(http: OutboundHTTP, kind: str) -> None:
    """E6: a 100 MB body or a 50 KB gzip that inflates to 50 MiB: the client reads ≤ 64 KiB and never
    inflates (auto-decompression is off); the error text quotes ≤ 1 KiB; traced memory peak stays small."""
    server = BigBodyServer(status=400) if kind == "100MB" else BigBodyServer(status=400, bomb=GZIP_BOMB)
    async with server:
        tracemalloc.start()
        try:
            with pytest.raises(DeliveryError) as caught:
                await http.send(OutboundRequest("POST", server.url + "/x"), timeout=10)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert caught.value.reason == "http_400"
    assert len(str(caught.value)) < 1200
    assert peak < 4 * MiB, f"peak {peak / MiB:.1f} MiB"
    if kind == "100MB":
        assert server.written[0] < 32 * MiB


async def test_retry_after_is_honoured_within_the_budget(http: OutboundHTTP) -> None:
    """E3: ``Retry-After: 1`` with a 5 s budget → the second attempt comes ≥ 1 s later and succeeds;
    ``Retry-After: 60`` with the same budget → one attempt, then a permanent-looking give-up at once."""
    async with CaptureServer() as server:
        server.on("*", "^/short$", then_ok(Reply(429, headers={"Retry-After": "1"})))
        server.on("*", "^/long$", Reply(429, headers={"Retry-After": "60"}))
        start = time.monotonic()
        assert (await http.send(OutboundRequest("POST", server.url + "/short"), timeout=5)).status == 200
        assert time.monotonic() - start >= 1.0
        start = time.monotonic()
        with pytest.raises(DeliveryError) as caught:
            await http.send(OutboundRequest("POST", server.url + "/long"), timeout=5)
        assert time.monotonic() - start < 0.5
        assert caught.value.reason == "http_429"
        assert [r.path for r in server.requests] == ["/short", "/short", "/long"]

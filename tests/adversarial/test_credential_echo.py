"""Issue 11 item 8: a provider or proxy that echoes the request in its error body.

Error bodies reach the logs and the Kubernetes Events (``NotificationDispatchFailed``). The raw token and
password were masked, but a body that quotes the *request* shows them encoded: ``Authorization: Basic
base64(user:password)`` (built from a Provider Secret's ``username``/``password``) and
``Proxy-Authorization: Basic base64(user:password)`` (from the proxy URL's userinfo). Here the real
controller (local mode) delivers to a local endpoint that answers 400 with every request header, and
through a local forward proxy that answers 502 with the request head it received. Every Event and every
log record (raw, before the production ``RedactingFilter``) is scanned for the credentials in raw, base64
and ``user:password`` form; the requests themselves did carry them (the scenario is not vacuous).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path

import pytest

from notification_controller.app import App
from tests.adversarial.kit import event_body, eventually, pair, secret
from tests.integration.appkit import events_url, local_cluster, running_app
from tests.support.capture import CapturedRequest, CaptureServer, Reply

NS = "flux-system"
USER = "am-user"
PASSWORD = "am-pa55word-canary-71c3"
PROXY_USER = "proxy-user"
PROXY_PASSWORD = "proxy-pa55-canary-e41d"


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


LEAKS = {
    "Basic credentials": basic(USER, PASSWORD),
    "password": PASSWORD,
    "Proxy-Authorization credentials": basic(PROXY_USER, PROXY_PASSWORD),
    "proxy password": PROXY_PASSWORD,
}


class EchoingProxy:
    """A forward proxy that refuses every request with a 502 whose body is the request head it got."""

    def __init__(self) -> None:
        self.heads: list[str] = []
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> EchoingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            self.heads.append(head)
            body = f"upstream unreachable; your request was:\n{head}".encode()
            writer.write(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def echo_headers(request: CapturedRequest) -> Reply:
    lines = "\n".join(f"{name}: {value}" for name, value in request.headers.items())
    return Reply(400, body=f"bad request; headers received:\n{lines}")


async def test_echoed_basic_and_proxy_credentials_are_masked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with CaptureServer() as sink, EchoingProxy() as proxy:
        sink.on("POST", r"^/alertmanager$", echo_headers)
        (tmp_path / "objects.yaml").write_text(
            pair("basic", "alertmanager", f"{sink.url}/alertmanager", secret="basic")
            + secret("basic", username=USER, password=PASSWORD)
            + pair(
                "proxied", "generic", "http://127.0.0.1:9/never", extra="\n  proxySecretRef: {name: proxy}"
            )
            + secret("proxy", address=proxy.url, username=PROXY_USER, password=PROXY_PASSWORD)
        )
        async with running_app(tmp_path) as app:
            await eventually(
                lambda: all(p.status.conditions for p in app.store.providers()), what="providers reconciled"
            )
            await post_event(app)
            await eventually(lambda: len(failures(app)) == 2, timeout=10, what="both deliveries failing")
            messages = failures(app)
        # Not vacuous: the credentials were sent, and echoed back.
        assert any(
            r.headers.get("Authorization") == f"Basic {LEAKS['Basic credentials']}" for r in sink.requests
        )
        assert any(f"Basic {LEAKS['Proxy-Authorization credentials']}" in head for head in proxy.heads)
    assert any("headers received" in m for m in messages) and any("your request was" in m for m in messages)
    emitted = [("Kubernetes Event", m) for m in messages]
    for record in caplog.records:
        emitted.append((f"log {record.levelname} {record.name}", record.getMessage()))
    leaks = [
        f"{what} in {where}: {text[:300]!r}"
        for where, text in emitted
        for what, v in LEAKS.items()
        if v in text
    ]
    assert leaks == []


async def post_event(app: App) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.post(events_url(app), data=event_body("deployed")) as resp:
            assert resp.status == 202


def failures(app: App) -> list[str]:
    return [e[3] for e in local_cluster(app).events if e[2] == "NotificationDispatchFailed"]


# ---- issue 23 item 15: a provider that rewrites its address (zoom re-sorts the query) ----------------
ZOOM_PATH_TOKEN = "zoomPathTok3n9f2c71ab"
ZOOM_QUERY_TOKEN = "zoomQueryTok3n5d8e04"
ZOOM_TOKEN = "zoom-verification-canary-6b1e"


def echo_request(request: CapturedRequest) -> Reply:
    """An endpoint that quotes the request line and head it received, as many gateways' 4xx pages do."""
    lines = "\n".join(f"{name}: {value}" for name, value in request.headers.items())
    return Reply(
        400, body=f"unknown webhook; you sent:\n{request.method} {request.raw_path} HTTP/1.1\n{lines}"
    )


async def test_zoom_rewritten_address_is_masked_in_logs_and_events(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The zoom provider sends to its address with ``format=full`` added and the query re-sorted (Go's
    ``url.Values.Encode``), so the mask of the address as written no longer matches what an echoing endpoint
    quotes. No form of the path or its query token may reach the ERROR log line or the Warning Event."""
    caplog.set_level(logging.DEBUG)
    async with CaptureServer() as sink:
        sink.on("POST", r"^/v1/im/chat/webhooks/", echo_request)
        address = f"{sink.url}/v1/im/chat/webhooks/{ZOOM_PATH_TOKEN}?token={ZOOM_QUERY_TOKEN}&lang=en"
        (tmp_path / "objects.yaml").write_text(
            pair("zoom", "zoom", "", secret="zoom") + secret("zoom", address=address, token=ZOOM_TOKEN)
        )
        async with running_app(tmp_path) as app:
            await eventually(
                lambda: all(p.status.conditions for p in app.store.providers()), what="providers reconciled"
            )
            await post_event(app)
            await eventually(lambda: len(failures(app)) == 1, timeout=10, what="the zoom delivery failing")
            messages = failures(app)
        # Not vacuous: the rewritten address was used, and the endpoint echoed it back.
        sent = sink.requests[0].raw_path
        assert sent == f"/v1/im/chat/webhooks/{ZOOM_PATH_TOKEN}?format=full&lang=en&token={ZOOM_QUERY_TOKEN}"
        assert sink.requests[0].headers["Authorization"] == ZOOM_TOKEN
    assert any("you sent" in m for m in messages), messages
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("failed to send notification" in text for text in errors), errors
    emitted = [("Kubernetes Event", m) for m in messages] + [
        (f"log {r.levelname} {r.name}", r.getMessage()) for r in caplog.records
    ]
    leaks = [
        f"{what} in {where}: {text[:400]!r}"
        for where, text in emitted
        for what, value in (
            ("path token", ZOOM_PATH_TOKEN),
            ("query token", ZOOM_QUERY_TOKEN),
            ("verification token", ZOOM_TOKEN),
        )
        if value in text
    ]
    assert leaks == []

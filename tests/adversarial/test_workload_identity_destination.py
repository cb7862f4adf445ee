"""Issue 23 item 6: the controller's Azure token must not go to a host the tenant chooses.

Before the fix, an ``azureeventhub`` Provider with ``channel: http://attacker:port`` (taken as is "for
emulators") or ``channel: attacker:port/`` (pasted before ``.servicebus.windows.net``) got the controller's
Event Hubs token as ``Authorization: Bearer ...``, and an ``azuredevops`` Provider without a ``token`` got
the controller's Azure DevOps token at whatever host its address named.

The controller runs as users run it (``python -m notification_controller`` in local mode) with the
controller's own Azure workload identity available: ``AZURE_FEDERATED_TOKEN_FILE``, ``AZURE_CLIENT_ID``,
``AZURE_TENANT_ID`` and ``AZURE_AUTHORITY_HOST`` pointing at a real local token endpoint that mints a canary
token. The tenant's endpoints are one raw TCP capture server that records every byte it receives. Without
the operator's flag the capture server never sees the token (nor any Event Hubs or Azure DevOps request),
nothing is even minted, and the log says why, naming the flag; with
``--workload-identity-custom-endpoints`` the same Providers do reach it with the token (the scenario is not
vacuous: this is what every tenant got before the fix).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.adversarial.kit import SHA, event_body, eventually, pair
from tests.support.capture import CaptureServer, Reply
from tests.support.controllers import ControllerProcess

pytestmark = pytest.mark.slow

CANARY = "controller-aad-token-canary-5f1e"
REFUSED = "refusing to send a workload identity token to"


class RawCapture:
    """A TCP server that keeps every byte each connection sent and answers ``201`` to each request."""

    def __init__(self) -> None:
        self.connections: list[bytearray] = []
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def received(self) -> bytes:
        return b"".join(bytes(c) for c in self.connections)

    async def __aenter__(self) -> RawCapture:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen = bytearray()
        self.connections.append(seen)
        try:
            async with asyncio.timeout(10):
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    seen += head
                    length = 0
                    for line in head.split(b"\r\n"):
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value.strip() or b"0")
                    if length:
                        seen += await reader.readexactly(min(length, 1 << 20))
                    body = b'{"count":0,"value":[]}'
                    writer.write(
                        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, TimeoutError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def azure_ad() -> AsyncIterator[CaptureServer]:
    async with CaptureServer() as server:
        server.on(
            "POST",
            r"/oauth2/v2\.0/token$",
            Reply(body={"access_token": CANARY, "expires_in": 3599, "token_type": "Bearer"}),
        )
        yield server


def manifests(directory: Path, port: int) -> Path:
    target = f"127.0.0.1:{port}"
    docs = [
        # The tenant's choices of destination (no Secret: the controller's identity is used).
        pair("eh-url", "azureeventhub", "hub-url", extra=f"\n  channel: http://{target}"),
        pair("eh-hostport", "azureeventhub", "hub-hostport", extra=f"\n  channel: {target}/"),
        pair("ado", "azuredevops", f"http://{target}/org/proj/_git/repo"),
        # A control delivery to the same server: the pipeline ran and the server records what it gets.
        pair("control", "generic", f"http://{target}/control"),
    ]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "objects.yaml").write_text("".join(docs), encoding="utf-8")
    return directory


@contextlib.asynccontextmanager
async def controller(tmp: Path, port: int, *flags: str) -> AsyncIterator[ControllerProcess]:
    ctl = ControllerProcess(manifests(tmp / "manifests", port), list(flags), tmp / "controller.log")
    await ctl.start(timeout=60)
    try:
        yield ctl
    finally:
        assert await ctl.stop() == 0, ctl.log()


async def post(ctl: ControllerProcess) -> None:
    body = event_body(**{"event.toolkit.fluxcd.io/commit": SHA})  # commit status types need the commit
    async with aiohttp.ClientSession() as session, session.post(ctl.events_url, data=body) as r:
        assert r.status == 202


def full_log(ctl: ControllerProcess) -> str:
    assert ctl.log_path is not None
    return ctl.log_path.read_text(errors="replace")


def refused(log: str, provider: str) -> bool:
    """The dispatcher's line for ``provider``'s failed delivery names the rule."""
    return any(REFUSED in line and f"provider {provider})" in line for line in log.splitlines())


@pytest.fixture
def identity_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "federated-token"
    token_file.write_text("federated-jwt-of-the-controller")
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AZURE_CLIENT_ID", "controller-client")
    monkeypatch.setenv("AZURE_TENANT_ID", "controller-tenant")


@pytest.mark.timeout(120)
async def test_tenant_chosen_hosts_never_receive_the_controller_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, identity_env: None
) -> None:
    async with azure_ad() as aad, RawCapture() as capture:
        monkeypatch.setenv("AZURE_AUTHORITY_HOST", aad.url + "/")
        async with controller(tmp_path, capture.port) as ctl:
            await post(ctl)
            await eventually(lambda: b"/control" in capture.received, timeout=30, what="the control delivery")
            # Settled: refused in the log, or (without the fix) the request reached the capture server.
            await eventually(
                lambda: all(
                    refused(full_log(ctl), name) or marker in capture.received
                    for name, marker in (("eh-url", b"/hub-url/messages"), ("ado", b"POST /org/proj/"))
                ),
                timeout=30,
                what="the eh-url and ado deliveries settled",
            )
            log = full_log(ctl)
        received = capture.received
        assert CANARY.encode() not in received
        assert b"Bearer" not in received and b"Basic" not in received
        assert b"/messages" not in received and b"/_apis/" not in received
        assert received.count(b"HTTP/1.1\r\n") == 1  # the control request, nothing else
        assert aad.requests == []  # refused before anything was minted
        assert CANARY not in log
        assert refused(log, "eh-url") and refused(log, "ado")
        refusals = [line for line in log.splitlines() if REFUSED in line]
        assert all("--workload-identity-custom-endpoints" in line for line in refusals), refusals
        # channel: host:port/ is not a namespace at all: the Provider is not Ready, with the rule.
        assert "invalid Event Hubs namespace '127.0.0.1:" in log


@pytest.mark.timeout(120)
async def test_operator_flag_lets_tokens_reach_an_emulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, identity_env: None
) -> None:
    """The same Providers with ``--workload-identity-custom-endpoints``: the capture server gets the token
    (what every tenant's endpoint got before the fix), so the test above is not vacuous."""
    async with azure_ad() as aad, RawCapture() as capture:
        monkeypatch.setenv("AZURE_AUTHORITY_HOST", aad.url + "/")
        async with controller(tmp_path, capture.port, "--workload-identity-custom-endpoints=true") as ctl:
            await post(ctl)
            await eventually(
                lambda: (
                    b"POST /hub-url/messages" in capture.received
                    and b"/org/proj/_apis/git/repositories/repo/" in capture.received
                ),
                timeout=30,
                what="the Event Hubs and Azure DevOps requests",
            )
        assert f"Bearer {CANARY}".encode() in capture.received
        assert len(aad.requests) >= 1

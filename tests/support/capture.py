"""Real local servers for tests: a request-capturing HTTP(S) server and an HTTP forward proxy.

Provider tests must prove what goes over the wire, so they run the code under test against these
servers on 127.0.0.1 (free ports, never the network) instead of mocking the HTTP client:

* ``CaptureServer`` records every request (``CapturedRequest``) and answers with scripted ``Reply``
  objects: per-route replies first (``on``), then a FIFO queue (``script``), then ``Reply()`` (200 ``{}``).
  A reply can be delayed or can reset the connection without answering. TLS and mutual TLS use
  material from ``mint_tls`` (a throw-away CA, a server certificate for 127.0.0.1, a client certificate).
* ``ForwardProxy`` is a minimal HTTP/1.1 forward proxy written on asyncio streams so that ``CONNECT``
  tunnels (HTTPS through a proxy) work too; it records the targets it saw and the
  ``Proxy-Authorization`` values it received, and can demand basic credentials (407 otherwise).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import json
import os
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from multidict import CIMultiDict

from tests.support.pki import make_ca

LOCALHOST = "127.0.0.1"


# --------------------------------------------------------------------------------------------------
# Requests and replies
# --------------------------------------------------------------------------------------------------


@dataclass
class CapturedRequest:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    raw_path: str  # path with the raw query string, exactly as sent
    headers: CIMultiDict[str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def text(self) -> str:
        return self.body.decode("utf-8")


@dataclass
class Reply:
    """What the capture server answers. ``dict``/``list`` bodies are sent as JSON."""

    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] = b"{}"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    reset: bool = False  # close the connection without answering

    def encoded(self) -> tuple[bytes, dict[str, str]]:
        headers = dict(self.headers)
        body = self.body
        if isinstance(body, dict | list):
            headers.setdefault("Content-Type", "application/json")
            return json.dumps(body).encode(), headers
        if isinstance(body, str):
            headers.setdefault("Content-Type", "text/plain; charset=utf-8")
            return body.encode(), headers
        if body:
            headers.setdefault("Content-Type", "application/json")
        return body, headers


ReplySource = Reply | Callable[[CapturedRequest], Reply]


# --------------------------------------------------------------------------------------------------
# TLS material
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TLSMaterial:
    """PEM bytes of a throw-away PKI: a CA, a server certificate (IP SAN) and a client certificate."""

    ca_pem: bytes
    ca_key_pem: bytes
    server_cert_pem: bytes
    server_key_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes
    hostname: str = LOCALHOST

    def server_context(self, require_client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        _load_chain(ctx, self.server_cert_pem, self.server_key_pem)
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(cadata=self.ca_pem.decode())
        return ctx

    def client_context(self, with_client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        if with_client_cert:
            _load_chain(ctx, self.client_cert_pem, self.client_key_pem)
        return ctx


def _load_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="capture-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
        with open(cert_path, "wb") as fh:
            fh.write(cert)
        with open(key_path, "wb") as fh:
            fh.write(key)
        ctx.load_cert_chain(cert_path, key_path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def mint_tls(hostname: str = LOCALHOST) -> TLSMaterial:
    """A CA, a server certificate for ``hostname`` (IP or DNS SAN) and a client certificate, all PEM."""
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)

    ca_key, ca_cert = make_ca("capture-test-ca", not_before, not_after)

    def leaf(cn: str, usage: x509.ObjectIdentifier, san: x509.GeneralName | None) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
        )
        if san is not None:
            builder = builder.add_extension(x509.SubjectAlternativeName([san]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(hostname))
    except ValueError:
        san = x509.DNSName(hostname)
    server_cert, server_key = leaf(hostname, ExtendedKeyUsageOID.SERVER_AUTH, san)
    client_cert, client_key = leaf("capture-test-client", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    return TLSMaterial(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        ca_key_pem=_key_pem(ca_key),
        server_cert_pem=server_cert,
        server_key_pem=server_key,
        client_cert_pem=client_cert,
        client_key_pem=client_key,
        hostname=hostname,
    )


# --------------------------------------------------------------------------------------------------
# The capture server
# --------------------------------------------------------------------------------------------------


class CaptureServer:
    """An aiohttp server on 127.0.0.1 that records requests and answers with scripted replies."""

    def __init__(self, tls: TLSMaterial | None = None, require_client_cert: bool = False) -> None:
        self.tls = tls
        self.require_client_cert = require_client_cert
        self.requests: list[CapturedRequest] = []
        self._queue: list[Reply] = []
        self._routes: list[tuple[str, re.Pattern[str], ReplySource]] = []
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{LOCALHOST}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests (after them: the default ``Reply()``)."""
        self._queue.extend(replies)

    def on(self, method: str, path_regex: str, reply: ReplySource) -> None:
        """Answer requests of ``method`` (``*`` for any) whose path matches ``path_regex`` (search).

        Route replies are checked before the queue and are not consumed.
        """
        self._routes.append((method.upper(), re.compile(path_regex), reply))

    async def wait_for(self, n: int, timeout: float = 5) -> list[CapturedRequest]:
        """Wait until at least ``n`` requests arrived; return them all. ``TimeoutError`` otherwise."""
        async with asyncio.timeout(timeout):
            while len(self.requests) < n:
                self._changed.clear()
                await self._changed.wait()
        return list(self.requests)

    def _choose(self, captured: CapturedRequest) -> Reply:
        for method, pattern, source in self._routes:
            if method in ("*", captured.method) and pattern.search(captured.path):
                return source(captured) if callable(source) else source
        if self._queue:
            return self._queue.pop(0)
        return Reply()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        captured = CapturedRequest(
            method=request.method,
            path=request.path,
            query={k: v for k, v in request.query.items()},
            raw_path=request.raw_path,
            headers=CIMultiDict(request.headers),
            body=body,
        )
        self.requests.append(captured)
        self._changed.set()
        reply = self._choose(captured)
        if reply.delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), reply.delay)
        if reply.reset:
            transport = request.transport
            if transport is not None:
                transport.abort()
            raise asyncio.CancelledError  # aiohttp treats a cancelled handler on a lost peer quietly
        payload, headers = reply.encoded()
        return web.Response(status=reply.status, body=payload, headers=headers)

    async def __aenter__(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        ssl_ctx = self.tls.server_context(self.require_client_cert) if self.tls else None
        site = web.TCPSite(self._runner, LOCALHOST, 0, ssl_context=ssl_ctx)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self._port = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


# --------------------------------------------------------------------------------------------------
# The forward proxy
# --------------------------------------------------------------------------------------------------


class ForwardProxy:
    """An HTTP/1.1 forward proxy on 127.0.0.1 (absolute-URI requests and ``CONNECT`` tunnels).

    ``seen`` lists ``host:port`` for tunnels and the absolute URL for plain requests; ``auth`` lists the
    ``Proxy-Authorization`` header value (or None) of every request. With ``require_auth`` the proxy
    answers 407 unless the request carries those basic credentials.
    """

    def __init__(
        self, require_auth: tuple[str, str] | None = None, routes: dict[str, tuple[str, int]] | None = None
    ) -> None:
        self.require_auth = require_auth
        self.routes = routes or {}
        """``host:port`` of a CONNECT target -> where the tunnel really goes (a fake ``slack.com:443``)."""
        self.seen: list[str] = []
        self.auth: list[str | None] = []
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._port = 0

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self._port}"

    def url_with_auth(self, user: str, password: str) -> str:
        return f"http://{user}:{password}@{LOCALHOST}:{self._port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, LOCALHOST, 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def _authorized(self, value: str | None) -> bool:
        if self.require_auth is None:
            return True
        expected = "Basic " + base64.b64encode(":".join(self.require_auth).encode()).decode()
        return value is not None and value.strip() == expected

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            headers: list[tuple[str, str]] = []
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers.append((name.strip(), value.strip()))
            proxy_auth = next((v for k, v in headers if k.lower() == "proxy-authorization"), None)
            self.auth.append(proxy_auth)
            if not self._authorized(proxy_auth):
                self.seen.append(target)
                writer.write(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                    b'Proxy-Authenticate: Basic realm="capture"\r\n'
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                await writer.drain()
                return
            if method.upper() == "CONNECT":
                self.seen.append(target)
                host, _, port = target.rpartition(":")
                host, port_number = self.routes.get(target, (host.strip("[]"), int(port)))
                up_reader, upstream = await asyncio.open_connection(host, port_number)
                self._writers.add(upstream)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await self._pipe_both(reader, writer, up_reader, upstream)
                return
            self.seen.append(target)
            parts = urlsplit(target)
            port_num = parts.port or (443 if parts.scheme == "https" else 80)
            up_reader, upstream = await asyncio.open_connection(parts.hostname, port_num)
            self._writers.add(upstream)
            origin_form = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            out = [f"{method} {origin_form} {version}"]
            for name, value in headers:
                if name.lower() in ("proxy-authorization", "proxy-connection", "connection", "keep-alive"):
                    continue
                out.append(f"{name}: {value}")
            out.append("Connection: close")
            upstream.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
            await upstream.drain()
            await self._pipe_both(reader, writer, up_reader, upstream)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError, asyncio.LimitOverrunError):
            return
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()
                    self._writers.discard(w)
            self._tasks.discard(task)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while chunk := await src.read(65536):
                dst.write(chunk)
                await dst.drain()
        except (ConnectionError, OSError):
            pass

    async def _pipe_both(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        to_up = asyncio.create_task(self._pipe(client_reader, up_writer))
        to_client = asyncio.create_task(self._pipe(up_reader, client_writer))
        try:
            await asyncio.wait({to_up, to_client}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (to_up, to_client):
                t.cancel()
            await asyncio.gather(to_up, to_client, return_exceptions=True)

"""A small, real SOCKS5 proxy (RFC 1928, username/password auth RFC 1929) for tests: it relays bytes and
records each CONNECT target and the credentials it was given."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from types import TracebackType


class Socks5Proxy:
    def __init__(self, require_auth: tuple[str, str] | None = None) -> None:
        self.require_auth = require_auth
        self.targets: list[str] = []
        self.credentials: list[tuple[str, str]] = []
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"socks5://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Socks5Proxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        version, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        wanted = 0x02 if self.require_auth else 0x00
        if version != 5 or wanted not in methods:
            writer.write(b"\x05\xff")
            return
        writer.write(bytes([5, wanted]))
        if wanted == 0x02:
            _, ulen = await reader.readexactly(2)
            user = (await reader.readexactly(ulen)).decode()
            (plen,) = await reader.readexactly(1)
            password = (await reader.readexactly(plen)).decode()
            self.credentials.append((user, password))
            ok = (user, password) == self.require_auth
            writer.write(b"\x01\x00" if ok else b"\x01\x01")
            if not ok:
                return
        _, cmd, _, atyp = await reader.readexactly(4)
        if atyp == 1:
            host = socket.inet_ntoa(await reader.readexactly(4))
        elif atyp == 3:
            (length,) = await reader.readexactly(1)
            host = (await reader.readexactly(length)).decode()
        else:
            writer.write(b"\x05\x08\x00\x01" + b"\x00" * 6)
            return
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if cmd != 1:
            writer.write(b"\x05\x07\x00\x01" + b"\x00" * 6)
            return
        self.targets.append(f"{host}:{port}")
        upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        writer.write(b"\x05\x00\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", 0))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(ConnectionError, OSError):
                dst.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

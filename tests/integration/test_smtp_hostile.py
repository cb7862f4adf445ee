"""The smtp provider against hostile SMTP servers: a Provider's server cannot hang a delivery past
``spec.timeout``, nor make the controller buffer more than a bounded reply, nor read a secret back.

Each server is a raw asyncio server on 127.0.0.1 that misbehaves on purpose (silent, dripping, flooding,
stalling after DATA, echoing the password). Bounds are generous for a loaded machine; the attacks are not.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from notification_controller.errors import DeliveryError, FailureReason, RetryableDeliveryError
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.providers.base import DeliveryContext
from tests.integration.test_smtp import PASSWORD, build
from tests.providers.build import SAMPLE_EVENT

Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
FAST = RetryPolicy(max_attempts=5, wait_min=0.01, wait_max=0.05)


class Hostile:
    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.sent = 0  # bytes written to clients
        self.connections = 0
        self.port = 0

    async def write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        self.sent += len(data)
        await writer.drain()


@asynccontextmanager
async def hostile(make: Callable[[Hostile], Behaviour]) -> AsyncIterator[Hostile]:
    srv = Hostile(lambda r, w: asyncio.sleep(0))
    srv.behaviour = make(srv)
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        srv.connections += 1
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await srv.behaviour(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            tasks.discard(task)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    srv.port = int(server.sockets[0].getsockname()[1])
    try:
        yield srv
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


@pytest.fixture
async def ctx() -> AsyncIterator[DeliveryContext]:
    http = OutboundHTTP(FAST)
    await http.start()
    try:
        yield DeliveryContext(http=http)
    finally:
        await http.close()


async def timed_failure(
    address: str, ctx: DeliveryContext, timeout: float, login: str | None = None, password: str | None = None
) -> tuple[DeliveryError, float]:
    notifier = build(address, timeout=f"{timeout:g}s", login=login, password=password)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DeliveryError) as info:
        await notifier.post(SAMPLE_EVENT, ctx)
    return info.value, loop.time() - started


async def greet_then(srv: Hostile, writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> None:
    """A normal greeting and EHLO answer (no STARTTLS, AUTH PLAIN)."""
    await srv.write(writer, b"220 hostile.test ESMTP\r\n")
    await reader.readline()
    await srv.write(writer, b"250-hostile.test\r\n250 AUTH PLAIN LOGIN\r\n")


async def test_a_silent_server_cannot_hold_a_delivery_past_its_timeout(ctx: DeliveryContext) -> None:
    def make(srv: Hostile) -> Behaviour:
        async def behaviour(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(3600)  # accepts, never greets

        return behaviour

    async with hostile(make) as srv:
        error, elapsed = await timed_failure(f"smtp://127.0.0.1:{srv.port}", ctx, 1.0)
    assert isinstance(error, RetryableDeliveryError) and error.failure is FailureReason.TIMEOUT
    assert 0.9 <= elapsed < 3.0, elapsed


async def test_a_dripping_server_is_cut_at_the_timeout(ctx: DeliveryContext) -> None:
    """One byte every 50 ms of an endless multi-line greeting: every read makes progress, none completes."""

    def make(srv: Hostile) -> Behaviour:
        async def behaviour(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                for byte in b"220-still greeting you\r\n":
                    await srv.write(writer, bytes([byte]))
                    await asyncio.sleep(0.05)

        return behaviour

    async with hostile(make) as srv:
        error, elapsed = await timed_failure(f"smtp://127.0.0.1:{srv.port}", ctx, 1.5)
    assert isinstance(error, RetryableDeliveryError) and error.failure is FailureReason.TIMEOUT
    assert 1.4 <= elapsed < 3.5, elapsed


async def test_a_stall_after_the_message_is_cut_at_the_timeout(ctx: DeliveryContext) -> None:
    def make(srv: Hostile) -> Behaviour:
        async def behaviour(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await greet_then(srv, writer, reader)
            while (line := await reader.readline()) and not line.startswith(b"DATA"):
                await srv.write(writer, b"250 ok\r\n")
            await srv.write(writer, b"354 go ahead\r\n")
            await asyncio.sleep(3600)  # swallows the message, never answers the final dot

        return behaviour

    async with hostile(make) as srv:
        error, elapsed = await timed_failure(f"smtp://127.0.0.1:{srv.port}", ctx, 1.0)
    assert error.failure is FailureReason.TIMEOUT and elapsed < 3.0, elapsed


async def test_a_slow_server_cannot_stretch_a_delivery_one_reply_at_a_time(ctx: DeliveryContext) -> None:
    """Every reply comes just before a per-command timer would fire: the delivery's budget still ends it."""

    def make(srv: Hostile) -> Behaviour:
        async def behaviour(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(1.0)
            await srv.write(writer, b"220 slow.test ESMTP\r\n")
            while line := await reader.readline():
                await asyncio.sleep(1.0)
                reply = b"354 go on\r\n" if line.startswith(b"DATA") else b"250 ok\r\n"
                await srv.write(writer, reply)
                if line.startswith(b"DATA"):
                    while (body := await reader.readline()) and body != b".\r\n":
                        pass

        return behaviour

    async with hostile(make) as srv:
        error, elapsed = await timed_failure(f"smtp://127.0.0.1:{srv.port}", ctx, 1.5)
    assert error.failure is FailureReason.TIMEOUT and 1.4 <= elapsed < 3.5, (error, elapsed)


@pytest.mark.parametrize("shape", ["continuation-lines", "one-endless-line"])
async def test_a_flooding_server_is_read_up_to_a_bound(ctx: DeliveryContext, shape: str) -> None:
    """An endless reply (continuation lines, or one line without an end) fails the attempt once aiosmtplib's
    32 KiB reply cap is reached; the controller's memory for the whole delivery (5 attempts) stays small."""
    chunk = b"250-" + b"x" * 1020 + b"\r\n" if shape == "continuation-lines" else b"y" * 1024

    def make(srv: Hostile) -> Behaviour:
        async def behaviour(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await srv.write(writer, b"220 flood.test ESMTP\r\n")
            await reader.readline()
            if shape == "one-endless-line":
                await srv.write(writer, b"250 ")
            while True:
                await srv.write(writer, chunk * 16)

        return behaviour

    async with hostile(make) as srv:
        tracemalloc.start()
        try:
            error, elapsed = await timed_failure(f"smtp://127.0.0.1:{srv.port}", ctx, 10.0)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert isinstance(error, RetryableDeliveryError), error
    assert (error.failure, error.reason) == (FailureReason.SERVER_ERROR, "invalid_response"), error
    assert "too long" in str(error).lower()
    assert srv.connections == FAST.max_attempts and elapsed < 8.0
    assert peak < 4 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB while the server sent {srv.sent / 1e6:.1f} MB"
    assert len(str(error)) < 600  # the reply is not quoted whole


async def test_a_server_echoing_the_password_does_not_get_it_into_the_error(
    ctx: DeliveryContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    def make(srv: Hostile) -> Behaviour:
        async def behaviour(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await greet_then(srv, writer, reader)
            line = await reader.readline()  # AUTH PLAIN <base64>
            secret = base64.b64decode(line.split()[-1]).split(b"\x00")[-1]
            while line:  # every command (AUTH LOGIN next) gets the password back
                await srv.write(writer, b"535 5.7.8 wrong password: " + secret + b"\r\n")
                line = await reader.readline()

        return behaviour

    async with hostile(make) as srv:
        error, _ = await timed_failure(
            f"smtp://127.0.0.1:{srv.port}", ctx, 5.0, login="mailer", password=PASSWORD
        )
    assert error.failure is FailureReason.AUTH and "wrong password: ***" in str(error), str(error)
    assert PASSWORD not in str(error) and PASSWORD not in caplog.text

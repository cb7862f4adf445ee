"""Hostile clients against the event listener's own HTTP/1.1 layer (``server/http1.py``, issue 23 items 2,
7, 8 and 16), each against the real controller (``python -m notification_controller`` in local mode, on
127.0.0.1), while ``/healthz`` is probed and a legitimate producer keeps posting events.

* **An endless header** (item 2): 48 connections stream one header value without end. The controller used
  to keep every byte (llhttp's binding concatenates a header as it arrives and the size was checked only
  when the header was complete): RSS 58 MB → 1.42 GB in 10 s. Now the head is counted as it arrives: 431
  after at most a header line plus one parser slice, RSS bounded.
* **Pipelining without reading** (item 7): 100 clients pipeline requests and never read an answer. The
  controller used to parse a whole read (256 KiB, ~9,700 tiny requests) into its queue: ~4 MB pinned per
  client, for ever. Now the parser is fed in slices and stops at ``max_pipelined`` waiting requests, and a
  client that does not read its answers for ``write_timeout`` (10 s) is closed.
* **Leaving during admission** (item 8): with a durable store, a client that half-closes or disconnects
  while its event is being stored used to cancel the admission after the duplicate window was taken: the
  event was lost and every retry got 429 for five minutes. Now an admission runs to its end: a half-closed
  client gets its 202, a gone one's retry gets 429 and the event is delivered.
* **Protocol details** (item 16): ``100 Continue`` only after every earlier pipelined answer; Host,
  Transfer-Encoding and Expect checked as Go's net/http and aiohttp do (the stricter of the two).

Every attack is bounded in connections, bytes and seconds; the test measures the controller's RSS from
``/proc/<pid>/status`` and its server-side connections from ``/proc/net/tcp``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import aiohttp

from tests.adversarial.kit import parse_answer, raw_request
from tests.support.controllers import ControllerProcess, FlakySink, event, manifests

LOCALHOST = "127.0.0.1"


def rss_mb(pid: int) -> float:
    """VmRSS of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def server_connections(port: int) -> int:
    """Established TCP connections whose local port is ``port`` (the server's side), from /proc/net/tcp."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
            count += 1
    return count


def body(name: str, message: str = "Reconciliation finished") -> bytes:
    return json.dumps(event(name, message)).encode()


def post(payload: bytes, extra: bytes = b"", *, host: bytes = b"Host: x\r\n", close: bool = False) -> bytes:
    return (
        b"POST / HTTP/1.1\r\n"
        + host
        + (b"Connection: close\r\n" if close else b"")
        + extra
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )


def chunked(transfer_encoding: bytes) -> bytes:
    return b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + transfer_encoding + b"\r\n0\r\n\r\n"


@contextlib.asynccontextmanager
async def controller(tmp: Path, sink: FlakySink, *args: str) -> AsyncIterator[ControllerProcess]:
    proc = ControllerProcess(
        manifests(tmp / "manifests", sink.url), list(args), log_path=tmp / "controller.log"
    )
    await proc.start()
    try:
        yield proc
    finally:
        await proc.stop()


@dataclass
class Watch:
    """While an attack runs: the controller's peak RSS, ``/healthz`` probes and a legitimate client (``legit``)
    sending every 0.3 s — here a producer posting a distinct event (each must be ``expected``: 202); the
    receiver listener's suite sends signed pushes instead (``test_receiver_listener.py``)."""

    proc: ControllerProcess
    base_rss: float = 0.0
    peak_rss: float = 0.0
    health: list[float] = field(default_factory=list)  # latency of each probe; inf: no answer in 5 s
    answers: list[int] = field(default_factory=list)  # status of each legitimate request; 0: none in 5 s
    expected: int = 202
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def __aenter__(self) -> Self:
        self.base_rss = self.peak_rss = rss_mb(self.proc.pid)
        self._tasks = [
            asyncio.create_task(self._sample()),
            asyncio.create_task(self._probe()),
            asyncio.create_task(self.legit()),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def growth(self) -> float:
        return self.peak_rss - self.base_rss

    async def _sample(self) -> None:
        while True:
            self.peak_rss = max(self.peak_rss, rss_mb(self.proc.pid))
            await asyncio.sleep(0.05)

    async def _probe(self) -> None:
        url = f"http://{LOCALHOST}:{self.proc.ports['health']}/healthz"
        loop = asyncio.get_running_loop()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                start = loop.time()
                try:
                    async with session.get(url) as resp:
                        ok = resp.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                self.health.append(loop.time() - start if ok else float("inf"))
                await asyncio.sleep(0.25)

    async def legit(self) -> None:
        async with aiohttp.ClientSession(  # a connection per event: none stays open on the event port
            timeout=aiohttp.ClientTimeout(total=5), connector=aiohttp.TCPConnector(force_close=True)
        ) as session:
            for i in range(1_000):
                try:
                    async with session.post(self.proc.events_url, data=body(f"legit-{i}")) as resp:
                        self.answers.append(resp.status)
                except (aiohttp.ClientError, TimeoutError):
                    self.answers.append(0)
                await asyncio.sleep(0.3)

    def assert_served(self) -> None:
        assert len(self.health) >= 2 and max(self.health) < 3.0, self.health
        assert len(self.answers) >= 2 and set(self.answers) == {self.expected}, self.answers


# ---- item 2: an endless header ---------------------------------------------------------------------------


async def endless_header(port: int, *, seconds: float = 6.0, cap: int = 4 << 20) -> tuple[int, int]:
    """Stream one header value without end (64 KiB writes) until the server answers or closes, ``cap``
    bytes or ``seconds``; returns (status of the answer, 0 if none; bytes sent)."""
    reader, writer = await asyncio.open_connection(LOCALHOST, port)
    answer = asyncio.create_task(reader.read())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    sent = 0
    chunk = b"a" * 65536
    try:
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        while sent < cap and not answer.done() and loop.time() < deadline:
            writer.write(chunk)
            try:
                await asyncio.wait_for(writer.drain(), max(0.01, deadline - loop.time()))
            except (ConnectionError, TimeoutError):
                break
            sent += len(chunk)
        try:
            raw = await asyncio.wait_for(answer, 5)
        except (ConnectionError, TimeoutError):
            raw = b""
    finally:
        answer.cancel()
        writer.close()
    return parse_answer(raw).status, sent


async def test_an_endless_header_is_431_and_memory_stays_bounded(tmp_path: Path) -> None:
    async with FlakySink() as sink, controller(tmp_path, sink) as proc:
        async with Watch(proc) as watch:
            results = await asyncio.gather(*(endless_header(proc.ports["events"]) for _ in range(48)))
            await asyncio.sleep(1.0)  # a few more probes and events after the attack
    statuses = [status for status, _ in results]
    assert watch.growth < 40, f"RSS {watch.base_rss:.0f} → {watch.peak_rss:.0f} MB, answers {statuses}"
    assert statuses == [431] * 48, (statuses, [sent for _, sent in results])
    watch.assert_served()


# ---- item 7: pipelining without reading ------------------------------------------------------------------

TINY = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"  # 405, ~130 bytes of answer for 27 bytes of request


async def pipeline_without_reading(port: int, *, total: int = 3 << 19) -> tuple[asyncio.StreamWriter, int]:
    """Pipeline ``total`` bytes of tiny requests (256 KiB writes) and read nothing; stop early if a write
    blocks for 1 s or the server closes. Returns the open writer and the bytes sent.

    The client's receive buffer is small (4 KiB): once the kernel's buffers hold all the answers they can
    (~30,000 here), the server's answers back up, it stops reading, and what it has parsed of its last read
    (up to 256 KiB: ~9,700 requests) stays."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (LOCALHOST, port))
    _reader, writer = await asyncio.open_connection(sock=sock)
    batch = TINY * ((256 << 10) // len(TINY))
    sent = 0
    while sent < total:
        writer.write(batch)
        try:
            await asyncio.wait_for(writer.drain(), 1.0)
        except (ConnectionError, TimeoutError):
            break
        sent += len(batch)
    return writer, sent


CLIENTS = 30


async def test_clients_that_pipeline_and_never_read_are_bounded_and_closed(tmp_path: Path) -> None:
    """30 clients (the issue's 100 cost a minute of CPU here: the kernel takes ~30,000 answers per connection
    before the server's writes back up): before the fix ~1.7 MB pinned per client and the connections stayed
    open for ever; now at most one slice of requests past ``max_pipelined`` and the rest of one read each, and
    every connection closed ``write_timeout`` (10 s) after its answers backed up."""
    async with FlakySink() as sink, controller(tmp_path, sink) as proc:
        port = proc.ports["events"]
        loop = asyncio.get_running_loop()
        async with Watch(proc) as watch:
            clients = await asyncio.gather(*(pipeline_without_reading(port) for _ in range(CLIENTS)))
            stopped_at = loop.time()
            stuck = server_connections(port)
            while server_connections(port) > 0 and loop.time() < stopped_at + 45:
                await asyncio.sleep(0.2)
            closed_after = loop.time() - stopped_at
            left = server_connections(port)
        for writer, _ in clients:
            writer.transport.abort()
    report = (
        f"RSS {watch.base_rss:.0f} → {watch.peak_rss:.0f} MB; {stuck} connections open when the clients"
        f" stopped, {left} still open {closed_after:.1f}s later; /healthz max {max(watch.health):.2f}s"
    )
    assert stuck >= CLIENTS * 0.9, report  # the attack took hold: the connections were open
    assert watch.growth < 40, report
    assert left == 0, report
    watch.assert_served()


# ---- item 8: leaving during admission (durable store) ----------------------------------------------------

FAST = ["--delivery-retry-base=50ms", "--delivery-retry-cap=300ms", "--store-ack-wait=2s"]


async def send_and_leave(port: int, payload: bytes, *, half_close: bool) -> int:
    """Send one event; then half-close and read the answer, or close at once. Returns the status read (0:
    none)."""
    reader, writer = await asyncio.open_connection(LOCALHOST, port)
    writer.write(post(payload))
    await writer.drain()
    if not half_close:  # gone before the answer, with a reset (a plain close is a half-close)
        writer.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
        writer.transport.abort()
        return 0
    writer.write_eof()
    try:
        raw = await asyncio.wait_for(reader.read(), 10)
    except (ConnectionError, TimeoutError):
        raw = b""
    finally:
        writer.close()
    return parse_answer(raw).status


async def test_an_event_whose_client_leaves_during_admission_is_not_lost(tmp_path: Path) -> None:
    names = [f"leaver-{i}" for i in range(50)]
    async with (
        FlakySink() as sink,
        controller(tmp_path, sink, f"--store=sqlite:{tmp_path / 's.db'}", *FAST) as proc,
    ):
        port = proc.ports["events"]
        first = await asyncio.gather(
            *(send_and_leave(port, body(name), half_close=i % 2 == 0) for i, name in enumerate(names))
        )
        # Flux's emitter retries what it got no answer for
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            retries = []
            for i, name in enumerate(names):
                if i % 2:
                    async with session.post(proc.events_url, data=body(name)) as resp:
                        retries.append(resp.status)
        with contextlib.suppress(TimeoutError):
            await sink.wait_unique(50, timeout=30)
        delivered = sink.unique
    assert first[0::2] == [202] * 25, first  # a half-closed client still gets its answer
    assert set(retries) <= {202, 429}, retries
    assert delivered == 50


# ---- item 16: 100 Continue after earlier answers; Host, Transfer-Encoding, Expect ------------------------


async def continue_order(port: int, first: bytes, second: bytes) -> list[int]:
    """Pipeline a complete POST and the head of a second one with ``Expect: 100-continue``; returns the
    statuses in the order they arrive (the second body is sent after the 100)."""
    reader, writer = await asyncio.open_connection(LOCALHOST, port)
    try:
        expect = (
            f"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {len(second)}\r\n\r\n"
        )
        writer.write(post(first) + expect.encode())
        statuses: list[int] = []
        async with asyncio.timeout(10):
            while len(statuses) < 3:
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split()[1])
                statuses.append(status)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if status == 100:
                    writer.write(second)
    finally:
        writer.close()
    return statuses


async def test_100_continue_never_overtakes_an_earlier_answer(tmp_path: Path) -> None:
    async with (
        FlakySink() as sink,
        controller(tmp_path, sink, f"--store=sqlite:{tmp_path / 's.db'}", *FAST) as proc,
    ):
        port = proc.ports["events"]
        orders = []
        for batch in range(10):
            orders += await asyncio.gather(
                *(continue_order(port, body(f"c-{batch}-{i}-a"), body(f"c-{batch}-{i}-b")) for i in range(10))
            )
    wrong = [order for order in orders if order != [202, 100, 202]]
    assert wrong == [], f"{len(wrong)} of {len(orders)}: {wrong[:5]}"


CASES: list[tuple[str, bytes, int]] = [
    ("missing-host", post(body("h1"), host=b"", close=True), 400),
    ("two-hosts", post(body("h2"), host=b"Host: a\r\nHost: b\r\n", close=True), 400),
    ("http10-without-host", post(body("h3"), host=b"").replace(b"HTTP/1.1", b"HTTP/1.0"), 202),
    ("empty-host", post(body("h4"), host=b"Host:\r\n", close=True), 202),
    ("te-gzip-chunked", chunked(b"Transfer-Encoding: gzip, chunked\r\n"), 501),
    ("two-te-lines", chunked(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"), 400),
    ("te-chunked-twice", chunked(b"Transfer-Encoding: chunked, chunked\r\n"), 400),
    ("te-gzip", chunked(b"Transfer-Encoding: gzip\r\n"), 400),
    ("expect-200-ok", post(body("e1"), b"Expect: 200-ok\r\n", close=True), 417),
    ("expect-100-continue-any-case", post(body("e2"), b"Expect: 100-Continue\r\n", close=True), 202),
    ("header-line-9000", post(body("l1"), b"X-Big: " + b"a" * 9000 + b"\r\n", close=True), 431),
    ("130-headers", post(body("l2"), b"".join(b"X-H%d: v\r\n" % i for i in range(130)), close=True), 431),
    ("request-line-9000", b"POST /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
]


async def test_protocol_details_as_go_and_aiohttp(tmp_path: Path) -> None:
    """Each request on its own connection; the answer's status, and the connection closed after every
    refusal (``Connection: close``)."""
    async with FlakySink() as sink, controller(tmp_path, sink) as proc:
        port = proc.ports["events"]
        got = {}
        for name, request, _ in CASES:
            answer = await raw_request(port, request)
            if answer.status == 100:  # the interim answer, then the answer
                answer = parse_answer(answer.body)
            got[name] = answer.status
            if answer.status >= 400:
                assert b"Connection: close" in answer.head, (name, answer.head)
        assert (await raw_request(port, post(body("after"), close=True))).status == 202
    assert got == {name: status for name, _, status in CASES}

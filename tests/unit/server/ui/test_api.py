"""The JSON API's parameters and its live stream (server/ui/api.py), on a real aiohttp listener.

The parameter parser is pure (every parameter's bad values name it). The stream runs on a real socket
with the real memory history: a record reaches a subscriber, the filter applies, an idle stream gets
heartbeats, the subscriber cap answers 503, and a client that stops reading is disconnected once a write
waits longer than ``WRITE_TIMEOUT`` — its slot and its history subscription are given back. The whole
controller behind the listener: tests/integration/test_history_api.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from notification_controller.history import MemoryHistory, Outcome, Query, Record, new_record_id
from notification_controller.history.sqlite import SQLiteHistory
from notification_controller.objects.base import ObjectStore
from notification_controller.server.ui import api
from notification_controller.server.ui.api import ParamError, api_routes, query_from_params
from notification_controller.server.ui.context import StreamSlots, UIContext

NOW = 1_800_000_000.0


# ---- parameters -------------------------------------------------------------------------------------
def test_every_parameter_reaches_the_query() -> None:
    q = query_from_params(
        {
            "object": "Kustomization/flux-system/apps",
            "alert": "flux-system/on-call",
            "provider": "flux-system/slack",
            "outcome": "dead_lettered",
            "event": "0123abc",
            "notification": "n-1",
            "since": "1h",
            "until": "2027-01-15T09:00:00+01:00",
            "limit": "1000",
        },
        NOW,
    )
    assert (q.object, q.alert, q.provider, q.outcome) == (
        "Kustomization/flux-system/apps",
        "flux-system/on-call",
        "flux-system/slack",
        "dead_lettered",
    )
    assert (q.event_id, q.notification_id, q.since, q.limit) == ("0123abc", "n-1", NOW - 3600, 1000)
    assert q.until == NOW  # 2027-01-15T08:00:00Z
    assert query_from_params({}, NOW).limit == 100
    assert query_from_params({"outcome": "", "since": ""}, NOW) == query_from_params({}, NOW)  # empty: any


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"outcome": "exploded"}, "outcome: 'exploded' is not one of"),
        ({"object": "apps"}, "object: 'apps' is not KIND/NAMESPACE/NAME"),
        ({"object": "Kustomization//apps"}, "object:"),
        ({"alert": "a/b/c"}, "alert: 'a/b/c' is not NAMESPACE/NAME"),
        ({"provider": "slack"}, "provider:"),
        ({"event": "<script>"}, "event: '<script>' is not an id"),
        ({"notification": "x" * 200}, "notification:"),
        ({"since": "yesterday"}, "since: 'yesterday' is neither a duration"),
        ({"until": "7d"}, "until:"),
        ({"since": "9" * 400 + "h"}, "since: '99999"),  # infinity: no store can seek it
        ({"until": "876600h1s"}, "until: '876600h1s' is more than 100 years back"),
        ({"since": "1h", "until": "2h"}, "until: earlier than since"),
        ({"limit": "1001"}, "limit: must be between 1 and 1000, got 1001"),
        ({"limit": "0"}, "limit:"),
        ({"limit": "ten"}, "limit: 'ten' is not a number"),
        ({"outcomes": "failed"}, "outcomes: unknown parameter"),
        ({"alert": "a/" + "b" * 2000}, "alert: longer than 512 characters"),
    ],
)
def test_a_bad_parameter_is_named(params: dict[str, str], names: str) -> None:
    with pytest.raises(ParamError) as info:
        query_from_params(params, NOW)
    assert str(info.value).startswith(names)
    assert len(str(info.value)) < 300  # a 2,000-character value is not echoed back whole


# ---- the stream, on a real listener -----------------------------------------------------------------
def _record(message: str = "m", outcome: Outcome = Outcome.DELIVERED, alert: str = "ns/a") -> Record:
    return Record(
        id=new_record_id(),
        time=NOW,
        event_id="e1",
        notification_id="n1",
        object="Kustomization/ns/apps",
        severity="info",
        reason="R",
        message=message,
        alert=alert,
        provider="ns/p",
        provider_type="generic",
        outcome=outcome,
    )


@dataclass
class Rig:
    url: str
    history: MemoryHistory
    ctx: UIContext


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    history = MemoryHistory(100)
    ctx = UIContext(history=history, objects=ObjectStore(), status=list, streams=StreamSlots(limit=2))
    app = web.Application()
    app.add_routes(api_routes(ctx))
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Rig(f"http://127.0.0.1:{port}", history, ctx)
    finally:
        await history.close()
        await runner.cleanup()


async def _events(resp: aiohttp.ClientResponse, n: int) -> list[str]:
    """The next ``n`` server-sent blocks (records and comments), as text."""
    blocks: list[str] = []
    buffer = b""
    async with asyncio.timeout(30):
        while len(blocks) < n:
            buffer += await resp.content.readany()
            while b"\n\n" in buffer and len(blocks) < n:
                block, buffer = buffer.split(b"\n\n", 1)
                blocks.append(block.decode())
    return blocks


async def _subscribed(rig: Rig, n: int) -> None:
    async with asyncio.timeout(30):
        while len(rig.history._live) != n:
            await asyncio.sleep(0.01)


async def test_a_record_reaches_a_subscriber_and_the_filter_applies(rig: Rig) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(rig.url + "/api/stream?outcome=failed") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            [hello] = await _events(resp, 1)
            assert hello.startswith("retry: 3000")
            await _subscribed(rig, 1)
            rig.history.record(_record("not this one"))  # delivered: filtered out
            rig.history.record(_record("</script><script>alert(1)</script>\n\ndata: x", Outcome.FAILED))
            [block] = await _events(resp, 1)
    lines = block.split("\n")
    assert lines[0] == "event: record" and lines[1].startswith("id: ") and len(lines) == 3
    data = json.loads(lines[2].removeprefix("data: "))
    assert data["outcome"] == "failed" and data["message"].startswith("</script>")  # one line: no injection


async def test_an_idle_stream_gets_heartbeats(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "HEARTBEAT", 0.05)
    async with aiohttp.ClientSession() as session:
        async with session.get(rig.url + "/api/stream") as resp:
            blocks = await _events(resp, 3)
            assert blocks[1:] == [": keepalive", ": keepalive"]
            rig.history.record(_record("after the heartbeats"))  # the subscription survived the waits
            while True:
                [block] = await _events(resp, 1)
                if block != ": keepalive":
                    break
            assert "after the heartbeats" in block


async def test_beyond_the_cap_a_stream_is_503_and_a_closed_one_frees_its_slot(rig: Rig) -> None:
    async with aiohttp.ClientSession() as session:
        first = await session.get(rig.url + "/api/stream")
        second = await session.get(rig.url + "/api/stream")
        third = await session.get(rig.url + "/api/stream")
        assert (first.status, second.status, third.status) == (200, 200, 503)
        assert third.headers["Content-Type"].startswith("application/json")
        assert "too many live streams" in (await third.json())["error"]
        first.close()  # the client goes away: noticed at the next write
        async with asyncio.timeout(30):
            while rig.ctx.streams.taken > 1:
                rig.history.record(_record())
                await asyncio.sleep(0.02)
        again = await session.get(rig.url + "/api/stream")
        assert again.status == 200
        again.close()
        second.close()


async def test_a_client_that_stops_reading_is_dropped(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A raw socket with a small receive buffer never reads: the server's writes back up until one waits
    ``WRITE_TIMEOUT``, then the connection is closed and the slot and subscription are given back; the
    history never waited (``record`` is synchronous and returned every time)."""
    monkeypatch.setattr(api, "WRITE_TIMEOUT", 0.5)
    port = int(rig.url.rsplit(":", 1)[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    try:
        await _subscribed(rig, 1)
        big = "x" * 1000
        sent = 0
        async with asyncio.timeout(60):
            while rig.ctx.streams.taken:
                for _ in range(50):
                    rig.history.record(_record(big))
                sent += 50
                await asyncio.sleep(0.005)
        await _subscribed(rig, 0)  # the history's subscription ended with the stream
        assert sent < 200_000
        # the server closed the connection: after what was buffered, the client reads the end
        received = 0
        async with asyncio.timeout(30):
            while chunk := await loop.sock_recv(sock, 1 << 16):
                received += len(chunk)
        assert received < sent * 1100  # it did not get everything: most was dropped, not buffered
    finally:
        sock.close()


async def test_errors_are_json_and_only_get_and_head_are_answered(rig: Rig) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(rig.url + "/api/history", data=b"{}") as resp:
            assert resp.status == 405 and resp.headers["Allow"] == "GET, HEAD"
            assert (await resp.json())["error"].startswith("method POST not allowed")
        async with session.get(rig.url + "/api/nothing/here") as resp:
            assert (
                resp.status == 404 and (await resp.json())["error"] == "no such API path: /api/nothing/here"
            )
        async with session.get(rig.url + "/api/history?limit=5000") as resp:
            assert resp.status == 400 and (await resp.json())["error"].startswith("limit:")
        async with session.get(rig.url + "/api/history?outcome=failed&outcome=delivered") as resp:
            assert resp.status == 400 and (await resp.json())["error"] == "outcome: given more than once"
        async with session.head(rig.url + "/api/history") as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("application/json")
            assert await resp.read() == b""
        async with session.get(rig.url + "/api/events/nope") as resp:
            assert resp.status == 404 and "no records of event 'nope'" in (await resp.json())["error"]


class CountingSQLiteHistory(SQLiteHistory):
    """The real SQLite history, counting the queries in flight (a spy: every query still runs)."""

    in_flight = 0
    most = 0

    async def query(self, q: Query, /) -> list[Record]:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            return await super().query(q)
        finally:
            self.in_flight -= 1


async def test_a_flood_of_queries_runs_a_few_at_a_time_and_every_one_is_answered(tmp_path: Path) -> None:
    history = CountingSQLiteHistory(tmp_path / "h.db")
    await history.start()
    ctx = UIContext(history=history, objects=ObjectStore(), status=list)
    app = web.Application()
    app.add_routes(api_routes(ctx))
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/api/history?limit=1000"  # type: ignore[union-attr]
    try:
        for _ in range(3000):
            history.record(_record("x" * 500))
        async with asyncio.timeout(30):
            while len(await history.query(Query(limit=1000))) < 1000 or history._buffer:
                await asyncio.sleep(0.05)
        history.most = 0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def one() -> int:
                async with session.get(url) as resp:
                    data = await resp.json()
                    return len(data["items"]) if resp.status == 200 else resp.status

            answers = await asyncio.gather(*(one() for _ in range(40)))
        assert answers == [1000] * 40
        assert 1 <= history.most <= api.MAX_QUERIES
    finally:
        await runner.cleanup()
        await history.close()

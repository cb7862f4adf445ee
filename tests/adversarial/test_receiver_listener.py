"""Hostile clients against the receiver listener (``:9292``) on the event listener's HTTP/1.1 layer (issue 29 item 5:
``server/http1.py`` replaced aiohttp there), each against the real controller (``python -m notification_controller``
in local mode, on 127.0.0.1) while a legitimate sender keeps posting signed GitHub pushes (each must be 200)
and ``/healthz`` is probed.

* **An endless header**: 24 connections stream one header value without end: 431 after at most a header line
  plus one parser slice, RSS bounded (aiohttp answered 400 past 8190 bytes; the bound is the layer's now).
* **Pipelining without reading**: clients that pipeline requests to the hook port and never read are bounded
  (``max_pipelined``) and closed ``write_timeout`` after their answers back up.
* **Gzip bombs**: 50 MiB of zeros gzipped (~50 KB), in parallel and in 1 MiB members, on the Receiver's own
  path: 413, never inflated past the 3 MiB cap (RSS bounded), nothing annotated.
* **Unknown paths tell nothing**: an unknown hook, the Receiver's path with a query, upper-cased or with a
  trailing slash, any method: the same 404 (the same head but ``Date``, no body); only the exact path with
  another method than POST says 405.
* **Replays and the rate limit** hold through the process: a delivery id seen before is 200 without a second
  annotation; past the burst, 429 with ``Retry-After``; refusals never patch.

Every attack is bounded in connections, bytes and seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from notification_controller.core.webhook import webhook_path
from tests.adversarial.kit import eventually, raw_request
from tests.adversarial.test_listener_abuse import Watch as ListenerWatch
from tests.adversarial.test_listener_abuse import (
    endless_header,
    pipeline_without_reading,
    server_connections,
)
from tests.support.controllers import ControllerProcess

NS = "flux-system"
TOKEN = b"receiver-listener-token-7f3a"
PATH = webhook_path(TOKEN, "gh", NS)
PUSH = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "org/webapp"}}).encode()

MANIFESTS = f"""\
apiVersion: v1
kind: Secret
metadata: {{name: gh-token, namespace: {NS}}}
stringData: {{token: {TOKEN.decode()}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {{name: gh, namespace: {NS}}}
spec:
  type: github
  events: [push]
  secretRef: {{name: gh-token}}
  resources: [{{kind: GitRepository, name: webapp}}]
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: webapp, namespace: {NS}}}
spec: {{url: 'https://example.com/webapp'}}
"""


def push_headers(body: bytes, delivery: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": "sha256=" + hmac.new(TOKEN, body, hashlib.sha256).hexdigest(),
    }


@contextlib.asynccontextmanager
async def controller(tmp: Path, *args: str) -> AsyncIterator[ControllerProcess]:
    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "objects.yaml").write_text(MANIFESTS, encoding="utf-8")
    proc = ControllerProcess(manifests, ["--receiver-rate-limit=0", *args], log_path=tmp / "controller.log")
    await proc.start(timeout=60)
    try:
        await eventually(lambda: hook_ready(proc), timeout=30, what="the Receiver's hook")
        yield proc
    finally:
        assert await proc.stop() == 0, proc.log()


async def post(proc: ControllerProcess, body: bytes, headers: dict[str, str], path: str = PATH) -> int:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.post(proc.receiver_url + path, data=body, headers=headers) as resp,
    ):
        await resp.read()
        return resp.status


async def hook_ready(proc: ControllerProcess) -> bool:
    headers = push_headers(PUSH, "ready-probe")
    headers["X-GitHub-Event"] = "ping"
    return await post(proc, PUSH, headers) == 200


@dataclass
class Watch(ListenerWatch):
    """``test_listener_abuse.Watch`` with a legitimate sender posting a signed push with a new delivery id
    every 0.3 s (each must be 200)."""

    expected: int = 200

    async def legit(self) -> None:
        for i in range(1_000):
            try:
                self.answers.append(await post(self.proc, PUSH, push_headers(PUSH, f"legit-{i}")))
            except (aiohttp.ClientError, TimeoutError):
                self.answers.append(0)
            await asyncio.sleep(0.3)


async def test_an_endless_header_is_431_and_memory_stays_bounded(tmp_path: Path) -> None:
    async with controller(tmp_path) as proc:
        async with Watch(proc) as watch:
            results = await asyncio.gather(*(endless_header(proc.ports["receiver"]) for _ in range(24)))
            await asyncio.sleep(1.0)  # a few more probes and pushes after the attack
    statuses = [status for status, _ in results]
    assert watch.growth < 40, f"RSS {watch.base_rss:.0f} → {watch.peak_rss:.0f} MB, answers {statuses}"
    assert statuses == [431] * 24, (statuses, [sent for _, sent in results])
    watch.assert_served()


async def test_clients_that_pipeline_and_never_read_are_bounded_and_closed(tmp_path: Path) -> None:
    clients_count = 10
    async with controller(tmp_path) as proc:
        port = proc.ports["receiver"]
        loop = asyncio.get_running_loop()
        async with Watch(proc) as watch:
            clients = await asyncio.gather(*(pipeline_without_reading(port) for _ in range(clients_count)))
            stopped_at = loop.time()
            stuck = server_connections(port)
            while server_connections(port) > 0 and loop.time() < stopped_at + 45:
                await asyncio.sleep(0.2)
            left = server_connections(port)
        for writer, _ in clients:
            writer.transport.abort()
    report = f"RSS {watch.base_rss:.0f} → {watch.peak_rss:.0f} MB; {stuck} stuck, {left} left open"
    assert stuck >= clients_count * 0.9, report  # the attack took hold
    assert watch.growth < 40, report
    assert left == 0, report
    watch.assert_served()


async def test_gzip_bombs_are_413_and_never_inflated(tmp_path: Path) -> None:
    bomb = gzip.compress(b"\0" * (50 << 20), compresslevel=9)
    members = gzip.compress(b"\0" * (1 << 20), compresslevel=9) * 8
    assert len(bomb) < 100_000 and len(members) < 20_000
    async with controller(tmp_path) as proc:
        async with Watch(proc) as watch:
            statuses = await asyncio.gather(
                *(
                    post(proc, data, {**push_headers(data, f"bomb-{i}"), "Content-Encoding": "gzip"})
                    for i, data in enumerate([bomb, members] * 8)
                )
            )
            await asyncio.sleep(1.0)
        too_large = await proc.metric(
            "notification_receiver_requests_total", type="unknown", outcome="too_large"
        )
        accepted = await proc.metric(
            "notification_receiver_requests_total", type="github", outcome="accepted"
        )
    assert statuses == [413] * 16, statuses
    assert too_large == 16
    assert accepted == len(watch.answers) - watch.answers.count(0)  # only the legitimate pushes patched
    assert watch.growth < 40, f"RSS {watch.base_rss:.0f} → {watch.peak_rss:.0f} MB"
    watch.assert_served()


_DATE = re.compile(rb"\r\nDate: [^\r]*")


async def test_unknown_paths_answer_the_same_whatever_exists(tmp_path: Path) -> None:
    async with controller(tmp_path) as proc:
        port = proc.ports["receiver"]
        answers: dict[str, bytes] = {}
        for target in (
            "/hook/" + "0" * 64,
            PATH + "?x=1",
            PATH.upper(),
            PATH + "/",
            "/hook/" + PATH[6:14],
            "/hook/%2e%2e/" + PATH[6:],
        ):
            for method in ("POST", "GET", "PUT"):
                request = f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                answer = await raw_request(port, request.encode())
                answers[f"{method} {target}"] = _DATE.sub(b"", answer.head) + b"|" + answer.body
        exact = await raw_request(
            port, f"GET {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
    assert len(set(answers.values())) == 1, answers
    (only,) = set(answers.values())
    assert only.startswith(b"HTTP/1.1 404 ") and only.endswith(b"|"), only
    assert exact.status == 405 and b"Allow: POST" in exact.head


async def test_replays_and_the_rate_limit_hold_through_the_process(tmp_path: Path) -> None:
    async with controller(tmp_path, "--receiver-rate-limit=1", "--receiver-rate-burst=3") as proc:
        # the readiness probe (a ping) took one token
        assert await post(proc, PUSH, push_headers(PUSH, "once")) == 200
        assert await post(proc, PUSH, push_headers(PUSH, "once")) == 200  # the replay: acknowledged
        forged = {**push_headers(PUSH, "forged"), "X-Hub-Signature-256": "sha256=" + "0" * 64}
        assert [await post(proc, PUSH, forged) for _ in range(5)] == [400] * 5  # spend no tokens
        statuses = [await post(proc, PUSH, push_headers(PUSH, f"burst-{i}")) for i in range(4)]
        accepted = await proc.metric(
            "notification_receiver_requests_total", type="github", outcome="accepted"
        )
        replayed = await proc.metric(
            "notification_receiver_requests_total", type="github", outcome="replayed"
        )
        limited = await proc.metric(
            "notification_receiver_requests_total", type="github", outcome="rate_limited"
        )
    assert 429 in statuses, statuses
    assert replayed == 1
    assert accepted == 1 + statuses.count(200)
    assert limited == statuses.count(429) >= 1

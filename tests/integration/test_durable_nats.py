"""Several replicas on NATS JetStream (``--store=nats://``, issue 13): Debian's nats-server, real processes.

Every replica serves events and webhooks; the duplicate window, the receivers' replay window and the outbox
are shared, so an event POSTed to two replicas is one notification, a webhook delivery handled by one is a
replay on the other, and a replica SIGKILLed during a burst loses nothing: another one delivers what it held
once the ack wait runs out. The store going away turns 202 into 503 (Flux's emitters retry), never into a
lost notification.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from notification_controller.core.webhook import webhook_path
from tests.receivers.test_github import GITHUB_PUSH
from tests.support.controllers import ControllerProcess, FlakySink, event, manifests, post_event
from tests.support.nats_server import run_nats_server
from tests.support.ports import free_port
from tests.support.receiver_kit import github_signature

FAST = ["--delivery-retry-base=50ms", "--delivery-retry-cap=300ms", "--store-ack-wait=2s"]
TOKEN = "receiver-token-for-the-replay-test"
RECEIVER = f"""---
apiVersion: v1
kind: Secret
metadata: {{name: hook-token, namespace: flux-system}}
stringData: {{token: {TOKEN}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {{name: github, namespace: flux-system}}
spec:
  type: github
  events: [push]
  secretRef: {{name: hook-token}}
  resources: [{{kind: GitRepository, name: webapp}}]
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: webapp, namespace: flux-system}}
spec: {{url: "https://example.com/org/webapp", interval: 1m}}
"""


def replicas(tmp: Path, sink: FlakySink, url: str, n: int, *extra: str) -> list[ControllerProcess]:
    directory = manifests(tmp / "manifests", sink.url)
    with (directory / "manifests.yaml").open("a", encoding="utf-8") as fh:
        fh.write(RECEIVER)
    return [
        ControllerProcess(directory, [f"--store={url}", *FAST, *extra], log_path=tmp / f"replica-{i}.log")
        for i in range(n)
    ]


@contextlib.asynccontextmanager
async def running(procs: list[ControllerProcess]) -> AsyncIterator[list[ControllerProcess]]:
    try:
        await asyncio.gather(*(p.start() for p in procs))
        yield procs
    finally:
        for p in procs:
            await p.stop()


async def test_two_replicas_share_the_duplicate_and_replay_windows(tmp_path: Path) -> None:
    async with run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as nats, FlakySink() as sink:
        async with (
            running(replicas(tmp_path, sink, nats.url, 2)) as (a, b),
            aiohttp.ClientSession() as session,
        ):
            same = event("webapp", message="Health check failed")
            assert await post_event(session, a.events_url, same) == 202
            assert await post_event(session, b.events_url, same) == 429  # Flux (per pod) would send it twice
            await sink.wait_unique(1, timeout=10)
            await asyncio.sleep(0.5)
            assert sum(sink.keys.values()) == 1

            path = webhook_path(TOKEN.encode(), "github", "flux-system")
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
                "X-Hub-Signature-256": github_signature(TOKEN.encode(), GITHUB_PUSH),
            }
            for proc in (a, b):
                async with session.post(proc.receiver_url + path, data=GITHUB_PUSH, headers=headers) as resp:
                    assert resp.status == 200
            assert await a.metric("notification_receiver_requests_total", outcome="replayed") == 0
            assert await b.metric("notification_receiver_requests_total", outcome="replayed") == 1
            assert "requested reconciliation of GitRepository/flux-system/webapp" in a.log()
            assert "requested reconciliation" not in b.log()


async def test_a_replica_sigkilled_during_a_burst_of_1000_loses_nothing(tmp_path: Path) -> None:
    async with run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as nats, FlakySink() as sink:
        procs = replicas(tmp_path, sink, nats.url, 2, "--provider-concurrency=4")
        async with running(procs) as (a, b):
            sink.delay = 0.01  # deliveries stay in flight: the kill catches some
            names = [f"app{i}" for i in range(1000)]
            async with aiohttp.ClientSession() as session:

                async def send(proc: ControllerProcess, part: list[str]) -> list[int]:
                    return [await post_event(session, proc.events_url, event(n)) for n in part]

                codes_a, codes_b = await asyncio.gather(send(a, names[0::2]), send(b, names[1::2]))
            assert codes_a + codes_b == [202] * 1000
            await sink.wait_unique(100, timeout=30)
            await a.kill()  # mid-burst: a holds leases, has more in flight
            assert sink.unique < 1000, "the kill came too late to prove anything"
            await sink.wait_unique(1000, timeout=90)  # b delivers the rest, a's leases included
            await asyncio.sleep(2.5)  # past the ack wait: every redelivery that will happen has happened
            # at-least-once: a's in-flight deliveries (4 workers per lane) may arrive twice, nothing is lost
            assert sink.duplicates <= 8, sink.keys.most_common(10)
            assert await b.metric("notification_dead_letters_total") == 0


async def first_answer(session: aiohttp.ClientSession, url: str, timeout: float = 30.0) -> int:
    """The status of ``url`` once the process listens (its start takes seconds on a loaded machine)."""
    async with asyncio.timeout(timeout):
        while True:
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with session.get(url) as resp:
                    return resp.status
            await asyncio.sleep(0.1)


async def test_store_down_at_start_and_lost_mid_run_answers_503_never_202_and_lose(tmp_path: Path) -> None:
    port = free_port()
    store_dir = str(tmp_path / "js")
    async with FlakySink() as sink:
        (proc,) = replicas(tmp_path, sink, f"nats://127.0.0.1:{port}", 1)
        await proc.start(wait_ready=False)
        try:
            async with aiohttp.ClientSession() as session:
                assert await first_answer(session, proc.ready_url) == 503  # the store is unreachable
                assert await post_event(session, proc.events_url, event("early")) == 503
                not_ready = await proc.metric("notification_events_rejected_total", reason="not_ready")
                async with run_nats_server(jetstream=True, store_dir=store_dir, port=port):
                    await proc.wait_ready(60)  # connected by itself
                    assert await post_event(session, proc.events_url, event("kept")) == 202
                    await sink.wait_unique(1, timeout=10)
                    sink.failing = True
                    assert await post_event(session, proc.events_url, event("waits")) == 202
                    await asyncio.sleep(0.5)
                # the server is gone: nothing can be stored, so nothing is accepted
                await asyncio.sleep(1.5)
                assert await post_event(session, proc.events_url, event("refused")) == 503
                # refused by asking the store, not by remembering a failed call (issue 23 item 10: such a
                # latch outlived a JetStream leader election by seconds)
                rejected = "notification_events_rejected_total"
                assert await proc.metric(rejected, reason="not_ready") == not_ready
                assert await proc.metric(rejected, reason="store_unavailable") >= 1
                sink.failing = False
                async with run_nats_server(jetstream=True, store_dir=store_dir, port=port):
                    await proc.wait_ready(60)
                    await sink.wait_unique(2, timeout=30)  # "waits" survived the server restart
                    assert await post_event(session, proc.events_url, event("after")) == 202
                    await sink.wait_unique(3, timeout=10)
                    names = sorted(b.decode() for b in sink.bodies)
                    assert not any('"refused"' in n or '"early"' in n for n in names)
                    assert await proc.metric("notification_store_errors_total") > 0
        finally:
            await proc.stop()

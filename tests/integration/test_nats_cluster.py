"""A three-node JetStream cluster losing its stream leader mid-burst (issue 23 item 10): real processes.

Three Debian ``nats-server`` processes (``-js -sd DIR``, routes on 127.0.0.1) form one cluster; the
controller gets the URL form ``config/ha`` ships, one ``nats://HOST:4222`` (here: one node's client port,
no ``?replicas``; nats-py learns the other nodes from the server's INFO). A burst of events is POSTed,
the leader of ``NC_OUTBOX`` (asked from JetStream: stream info ``cluster.leader``) is SIGKILLed in the
middle of it and started again, once with its disk and once with an empty one. What must hold:

* every stream and bucket is created with three replicas at start — the cluster's size, not R1 on one
  node (R1: the node's loss refused every event until it came back, and its empty disk lost what it held);
  an ``NC_OUTBOX`` left at R1 by an earlier version is scaled to R3, and the log says so;
* no notification answered 202 is missing at the sink; at most 1 % arrive twice;
* events are held through the leader election (the append is retried), not refused at once: a client is
  refused at most once per ``DEFAULT_ELECTION_GRACE``, and no 503 is answered later than 1 s after
  JetStream has elected the new leader (no failure latches the event server into refusing);
* the first event of a fresh cluster is accepted (the duplicate-window bucket exists before readiness).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import shutil
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from notification_controller.store.nats import DEFAULT_ELECTION_GRACE
from tests.support.controllers import ControllerProcess, FlakySink, event, manifests, post_event
from tests.support.nats_server import nats_server_binary
from tests.support.ports import free_port

FAST = ["--delivery-retry-base=50ms", "--delivery-retry-cap=300ms", "--store-ack-wait=2s"]
STREAMS = ("NC_OUTBOX", "NC_DEAD", "KV_nc_state", "KV_nc_seen_300000", "KV_nc_seen_600000")
T = TypeVar("T")
SENDERS = 4
ELECTION_SLACK = 1.0  # seconds after the new leader's election during which a 503 may still be answered


@dataclass
class Node:
    name: str
    client_port: int
    route_port: int
    store_dir: Path
    log_path: Path
    proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"


@dataclass
class Cluster:
    nodes: list[Node] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    async def start(self, node: Node) -> None:
        routes = ",".join(f"nats://127.0.0.1:{n.route_port}" for n in self.nodes)
        with node.log_path.open("ab") as log:
            node.proc = await asyncio.create_subprocess_exec(
                nats_server_binary(),
                *("-a", "127.0.0.1", "-p", str(node.client_port), "-js", "-sd", str(node.store_dir)),
                *("--server_name", node.name, "--cluster_name", "nc"),
                *("--cluster", f"nats://127.0.0.1:{node.route_port}", "--routes", routes),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
            )

    def kill(self, node: Node) -> None:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.returncode is None:
                node.proc.send_signal(signal.SIGKILL)
                await node.proc.wait()


@contextlib.asynccontextmanager
async def cluster_of_three(tmp: Path) -> AsyncIterator[Cluster]:
    cluster = Cluster(
        [Node(f"n{i}", free_port(), free_port(), tmp / f"n{i}", tmp / f"n{i}.log") for i in range(1, 4)]
    )
    try:
        for node in cluster.nodes:
            await cluster.start(node)
        async with admin(cluster) as (_, js):  # JetStream answers once the meta group has a leader
            await until(js.account_info, timeout=30)
        yield cluster
    finally:
        await cluster.stop()


async def quiet(_: Exception) -> None:
    return None


@contextlib.asynccontextmanager
async def admin(cluster: Cluster) -> AsyncIterator[tuple[Client, JetStreamContext]]:
    nc = await nats.connect(
        servers=cluster.urls,
        connect_timeout=2,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.1,
        allow_reconnect=True,
        error_cb=quiet,  # a node killed on purpose is not worth a traceback in the test's log
    )
    try:
        yield nc, nc.jetstream(timeout=0.5)
    finally:
        await nc.close()


async def until(call: Callable[[], Awaitable[T]], *, timeout: float) -> T:
    """``call()``'s answer once it gives one (a cluster forming or electing answers errors meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await call()
        except (nats.errors.Error, TimeoutError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)


@dataclass
class Burst:
    """Every POST of the burst: (started, ended, name, status), in the test's monotonic clock."""

    answers: list[tuple[float, float, str, int]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def accepted(self) -> set[str]:
        return {name for _, _, name, status in self.answers if status == 202}

    def refused_after(self, moment: float) -> list[tuple[float, float, str, int]]:
        return [a for a in self.answers if a[3] != 202 and a[0] > moment]


async def burst(url: str, into: Burst, prefix: str) -> None:
    counter = iter(range(1 << 30))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def sender() -> None:
            while not into.stop.is_set():
                name = f"{prefix}{next(counter)}"
                started = time.monotonic()
                status = await post_event(session, url, event(name))
                into.answers.append((started, time.monotonic(), name, status))

        await asyncio.gather(*(sender() for _ in range(SENDERS)))


async def leader(js: JetStreamContext, stream: str) -> str:
    info = await js.stream_info(stream)
    if info.cluster is None or not info.cluster.leader:
        raise nats.errors.TimeoutError  # no leader (yet): ask again
    return info.cluster.leader


def delivered_names(sink: FlakySink) -> set[str]:
    return {json.loads(body)["involvedObject"]["name"] for body in sink.bodies}


async def replicas_of(js: JetStreamContext) -> dict[str, int]:
    return {name: (await js.stream_info(name)).config.num_replicas or 1 for name in STREAMS}


async def leader_lost_mid_burst(tmp: Path, cluster: Cluster, sink: FlakySink, *, empty_disk: bool) -> None:
    """The scenario: POST, SIGKILL NC_OUTBOX's leader, wait for the election, restart it, check the sink."""
    directory = manifests(tmp / "manifests", sink.url)
    seed = cluster.nodes[0]
    controller = ControllerProcess(
        directory,
        [f"--store=nats://127.0.0.1:{seed.client_port}", *FAST, "--provider-concurrency=2"],
        log_path=tmp / "controller.log",
    )
    sink.delay = 0.5  # a slow Provider: the accepted notifications wait in the outbox when its leader dies
    async with admin(cluster) as (_, js):
        await controller.start(timeout=60)
        try:
            assert await replicas_of(js) == dict.fromkeys(STREAMS, 3), controller.log()
            answers = Burst()
            sending = asyncio.create_task(burst(controller.events_url, answers, "app"))
            try:
                async with asyncio.timeout(20):  # the burst is under way before the kill
                    while len(answers.accepted()) < 100:
                        await asyncio.sleep(0.05)
                victim = cluster.node(await until(lambda: leader(js, "NC_OUTBOX"), timeout=10))
                cluster.kill(victim)
                killed_at = time.monotonic()
                sink.delay = 0.0  # the backlog drains once a leader answers; then the lane is idle

                async def new_leader() -> str:
                    elected = await leader(js, "NC_OUTBOX")
                    if elected == victim.name:
                        raise nats.errors.TimeoutError
                    return elected

                try:
                    await until(new_leader, timeout=15)
                    elected_at: float | None = time.monotonic()
                except nats.errors.TimeoutError:  # R1: no other node has the stream
                    elected_at = None
                await asyncio.sleep(ELECTION_SLACK + 1.5)  # the burst goes on after the election
                assert victim.proc is not None
                await victim.proc.wait()
                if empty_disk:
                    shutil.rmtree(victim.store_dir)
                await cluster.start(victim)
                await asyncio.sleep(1.5)  # and with the node back
            finally:
                answers.stop.set()
                await sending
            accepted = answers.accepted()
            first = sorted(answers.answers)[:SENDERS]
            assert [a[3] for a in first] == [202] * SENDERS, f"the first events were refused: {first}"
            # every 202 reaches the sink, with the node back on its disk or on an empty one
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 40
            while not accepted <= delivered_names(sink) and loop.time() < deadline:
                await asyncio.sleep(0.2)
            lost = accepted - delivered_names(sink)
            assert not lost, (
                f"{len(lost)} of {len(accepted)} accepted notifications lost: {sorted(lost)[:10]}"
            )
            await asyncio.sleep(2.5)  # past the ack wait: every redelivery that will happen has happened
            assert sink.duplicates <= len(accepted) // 100, (sink.duplicates, len(accepted))
            assert elected_at is not None, "no other node took NC_OUTBOX over within 15 s of the kill"
            assert [a for a in answers.answers if a[0] > killed_at and a[3] == 202], "none accepted after"
            late = answers.refused_after(elected_at + ELECTION_SLACK)
            refused = [a for a in answers.answers if a[3] != 202]
            election = elected_at - killed_at
            assert not late, (
                f"{len(late)} refused more than {ELECTION_SLACK}s after the election ({election:.1f}s "
                f"after the kill); {len(refused)} refused in all; first: {late[:3]}"
            )
            # every refusal came from asking the store, none from a failure remembered by the controller
            remembered = await controller.metric("notification_events_rejected_total", reason="not_ready")
            assert remembered == 0, f"{remembered:.0f} events refused without asking the store"
            # held through the election, not refused at once: each sender waits up to the grace per try
            held = SENDERS * (math.ceil(election / DEFAULT_ELECTION_GRACE) + 1)
            assert len(refused) <= held, (
                f"{len(refused)} refused during a {election:.1f}s election; a client held through it "
                f"is refused at most once per {DEFAULT_ELECTION_GRACE}s ({held} for {SENDERS} clients)"
            )
            print(
                f"accepted {len(accepted)}, refused {len(refused)}, duplicates {sink.duplicates}, "
                f"election {election:.2f}s after the kill"
            )
        finally:
            await controller.stop()


async def test_leader_killed_mid_burst_and_back_with_its_disk(tmp_path: Path) -> None:
    async with cluster_of_three(tmp_path) as cluster, FlakySink() as sink:
        async with admin(cluster) as (_, js):  # what an earlier version left: the outbox on one node
            await until(
                lambda: js.add_stream(
                    StreamConfig(
                        name="NC_OUTBOX",
                        subjects=["nc.outbox.>"],
                        retention=RetentionPolicy.WORK_QUEUE,
                        storage=StorageType.FILE,
                        num_replicas=1,
                        duplicate_window=120.0,
                    )
                ),
                timeout=10,
            )
        await leader_lost_mid_burst(tmp_path, cluster, sink, empty_disk=False)
        log = (tmp_path / "controller.log").read_text()
        assert "stream NC_OUTBOX had 1 replica(s); updated to 3" in log


async def test_leader_killed_mid_burst_and_back_with_an_empty_disk(tmp_path: Path) -> None:
    async with cluster_of_three(tmp_path) as cluster, FlakySink() as sink:
        await leader_lost_mid_burst(tmp_path, cluster, sink, empty_disk=True)

"""Alert ``spec.heartbeat`` in the real controller (local mode, real processes, real HTTP sinks).

* beats arrive on schedule through the Alert's Provider, whatever its event sources, severity, exclusion
  list, ``filter`` (a comprehension: with a durable store it is evaluated at send time, where heartbeats
  skip it) and a Silence matching it say, and count as deliveries (metrics);
* a Provider that is down: the beat is retried from the durable outbox, then dead-lettered, and the history
  records it;
* a SIGKILL and a restart on a durable store: no second beat within the interval;
* two replicas on one SQLite store without leader election: each beat made once (the compare-and-set).

The interval is seconds here through ``NOTIFICATION_CONTROLLER_HEARTBEAT_MIN_INTERVAL`` (docs/monitoring.md:
for tests and demos); the real bound is 1m.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.controllers import ControllerProcess, FlakySink, event, post_event
from tests.support.ports import free_port

NS = "flux-system"
ENV = "NOTIFICATION_CONTROLLER_HEARTBEAT_MIN_INTERVAL"


def manifests(directory: Path, sink_url: str, interval: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "all.yaml").write_text(
        f"""apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: {NS}}}
spec: {{type: generic, address: "{sink_url}", timeout: 2s}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: beat, namespace: {NS}}}
spec:
  providerRef: {{name: sink}}
  eventSeverity: error
  eventSources: [{{kind: Kustomization, name: "*"}}]
  exclusionList: [".*"]
  filter: "event.metadata.exists(k, k == 'never')"
  eventMetadata: {{cluster: prod-eu}}
  heartbeat: {{interval: {interval}}}
---
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata: {{name: everything-about-beat, namespace: {NS}}}
spec:
  matchers: [{{name: name, value: beat}}]
  startsAt: "2020-01-01T00:00:00Z"
  endsAt: "2099-01-01T00:00:00Z"
  comment: a Silence does not stop a heartbeat
""",
        encoding="utf-8",
    )
    return directory


class Controller(ControllerProcess):
    ui = 0

    async def start(self, *, wait_ready: bool = True, timeout: float = 30.0) -> None:
        self.ui = free_port()
        self.args = [a for a in self.args if not a.startswith("--ui-addr")] + [
            f"--ui-addr=127.0.0.1:{self.ui}"
        ]
        await super().start(wait_ready=wait_ready, timeout=timeout)

    async def history(self, **query: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.ui}/api/history"
        async with aiohttp.ClientSession() as session, session.get(url, params=query) as resp:
            assert resp.status == 200, await resp.text()
            items: list[dict[str, Any]] = (await resp.json())["items"]
            return items


async def arrivals(sink: FlakySink, n: int, timeout: float, since: list[float] | None = None) -> list[float]:
    """Monotonic times at which the sink took its first ``n`` notifications (polled every 10 ms)."""
    times = list(since or [])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(times) < n:
        assert loop.time() < deadline, f"{len(times)} of {n} beats arrived"
        if len(sink.bodies) > len(times):
            times.extend([time.monotonic()] * (len(sink.bodies) - len(times)))
        await asyncio.sleep(0.01)
    return times


def beat_seconds(sink: FlakySink, n: int) -> list[int]:
    """When the first ``n`` beats were made, from their own ``timestamp`` (Flux's event time: whole seconds).
    Not when they arrived: a delivery held up by a loaded machine makes arrivals bunch together (a beat that
    arrived 0.8 s late looked 2.2 s after the next one), while the time a beat was made is what the schedule,
    the store's compare-and-set and a restart decide."""
    stamps = [json.loads(body)["timestamp"] for body in sink.bodies[:n]]
    return [int(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()) for t in stamps]


def gaps_of(seconds: list[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(sorted(seconds))]


async def test_beats_arrive_on_schedule_whatever_the_alert_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "1s")
    async with FlakySink() as sink:
        proc = Controller(manifests(tmp_path / "m", sink.url, "2s"), log_path=tmp_path / "c.log")
        await proc.start()
        try:
            async with aiohttp.ClientSession() as session:  # an event the Alert does not take
                assert await post_event(session, proc.events_url, event("apps")) == 202
            await arrivals(sink, 4, timeout=30)
            made = beat_seconds(sink, 4)
            # every 2 s, in whole seconds: 1 to 4 apart (a tick and a loaded machine late at most), and three
            # intervals in all (a beat every 1 s tick would span 3)
            assert all(1 <= gap <= 4 for gap in gaps_of(made)), made
            assert max(made) - min(made) >= 5, made
            body = json.loads(sink.bodies[0])
            assert body["involvedObject"]["kind"] == "Alert" and body["involvedObject"]["name"] == "beat"
            assert (body["reason"], body["severity"]) == ("Heartbeat", "info")
            assert (
                body["message"] == f"notification-controller is alive: heartbeat of Alert {NS}/beat, every 2s"
            )
            assert body["metadata"] == {"cluster": "prod-eu", "heartbeatInterval": "2s"}
            assert all(json.loads(b)["reason"] == "Heartbeat" for b in sink.bodies)  # the event: excluded
            assert await proc.metric("notification_heartbeats_total", outcome="sent") >= 4
            assert await proc.metric("notification_delivered_total", provider=f"{NS}/sink") >= 4
            assert (
                await proc.metric("notification_delivery_latency_seconds_count", provider_type="generic") >= 4
            )
            delivered = await proc.history(outcome="delivered", alert=f"{NS}/beat")
            assert len(delivered) >= 4
        finally:
            assert await proc.stop() == 0


async def test_a_beat_to_a_provider_that_is_down_is_retried_then_dead_lettered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "1s")
    async with FlakySink() as sink:
        sink.failing = True
        proc = Controller(
            manifests(tmp_path / "m", sink.url, "1h"),
            [
                f"--store=sqlite:{tmp_path / 'state.db'}",
                "--delivery-retry-base=100ms",
                "--delivery-retry-cap=300ms",
                "--delivery-max-age=3s",
                "--circuit-breaker-threshold=1000",
            ],
            log_path=tmp_path / "c.log",
        )
        await proc.start()
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while await proc.metric("notification_dead_letters_total", reason="max-age") < 1:
                assert loop.time() < deadline, proc.log()
                await asyncio.sleep(0.1)
            assert sink.refused >= 2  # retried before it was given up on
            assert len(set(sink.refused_keys)) == 1  # one beat (one Idempotency-Key), retried
            assert await proc.metric("notification_heartbeats_total", outcome="sent") == 1
            (dead,) = await proc.history(outcome="dead_lettered", alert=f"{NS}/beat")
            assert dead["object"] == f"Alert/{NS}/beat"
            assert len(await proc.history(outcome="retrying", alert=f"{NS}/beat")) >= 1
        finally:
            assert await proc.stop() == 0


async def test_no_second_beat_within_the_interval_after_a_sigkill_and_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "1s")
    interval = 6.0
    async with FlakySink() as sink:
        proc = Controller(
            manifests(tmp_path / "m", sink.url, "6s"),
            [f"--store=sqlite:{tmp_path / 'state.db'}"],
            log_path=tmp_path / "c.log",
        )
        await proc.start()
        try:
            times = await arrivals(sink, 1, timeout=30)
            await proc.kill()  # SIGKILL right after a beat...
            await proc.start()  # ...and back at once, on the same store
            await arrivals(sink, 3, timeout=40, since=times)
            made = beat_seconds(sink, 3)
            # the restart did not beat early: 6 s apart, 5 in whole seconds (an early beat: 1 to 3)
            assert all(gap >= interval - 1 for gap in gaps_of(made)), made
            assert sink.duplicates == 0
        finally:
            assert await proc.stop() == 0


async def test_two_replicas_on_one_store_beat_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No leader election: both replicas try every beat; the store's compare-and-set lets one through."""
    monkeypatch.setenv(ENV, "1s")
    async with FlakySink() as sink:
        directory = manifests(tmp_path / "m", sink.url, "3s")
        store = f"--store=sqlite:{tmp_path / 'state.db'}"
        replicas = [Controller(directory, [store], log_path=tmp_path / f"c{i}.log") for i in range(2)]
        for replica in replicas:
            await replica.start()
        try:
            await arrivals(sink, 4, timeout=40)
            made = beat_seconds(sink, 4)
            # 3 s apart, at least 2 in whole seconds (both replicas beating: 0.7 s apart, 0 or 1)
            assert all(gap >= 2 for gap in gaps_of(made)), made
            sent = [await r.metric("notification_heartbeats_total", outcome="sent") for r in replicas]
            # every beat made once, by one replica or the other (one more may be on its way)
            assert len(sink.keys) <= sum(sent) <= len(sink.keys) + 1, (sent, len(sink.keys))
            assert sink.duplicates == 0
        finally:
            for replica in replicas:
                assert await replica.stop() == 0

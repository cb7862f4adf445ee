"""Durable delivery with ``--store=sqlite:`` (issue 13): real controller processes, SIGKILL, a flaky sink.

What Flux loses, this keeps: notifications answered 202 survive a SIGKILL of the controller and a provider
outage longer than the old 15 s; every attempt carries the notification's ``Idempotency-Key``; what cannot
be delivered ends as a dead letter (metric, Event, CLI) instead of vanishing.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
from pathlib import Path

import aiohttp
from aiohttp import web

from notification_controller.deadletters import main as dead_letters
from tests.support.controllers import ControllerProcess, FlakySink, event, manifests, post_event

FAST = ["--delivery-retry-base=50ms", "--delivery-retry-cap=300ms", "--store-ack-wait=2s"]


def controller(tmp: Path, sink: FlakySink, *extra: str, alerts: int = 1) -> ControllerProcess:
    return ControllerProcess(
        manifests(tmp / "manifests", sink.url, alerts=alerts),
        [f"--store=sqlite:{tmp / 'state.db'}", *FAST, *extra],
        log_path=tmp / "controller.log",
    )


async def _post_all(url: str, names: list[str]) -> list[int]:
    async with aiohttp.ClientSession() as session:
        return [await post_event(session, url, event(name)) for name in names]


async def test_sigkill_mid_burst_loses_nothing(tmp_path: Path) -> None:
    async with FlakySink() as sink:
        proc = controller(tmp_path, sink, "--provider-concurrency=2")
        await proc.start()
        sink.delay = 0.02  # ~100 deliveries/s: the burst is accepted long before it is delivered
        codes = await _post_all(proc.events_url, [f"app{i}" for i in range(300)])
        accepted = codes.count(202)
        assert accepted == 300, codes
        await sink.wait_unique(20, timeout=20)  # delivery under way...
        await proc.kill()  # ...SIGKILL: no shutdown hook, leases held, nothing flushed
        delivered_before = sink.unique
        assert delivered_before < 300, "the kill came too late to prove anything"
        sink.delay = 0.0
        await proc.start()  # same file
        await sink.wait_unique(300, timeout=60)
        assert sink.unique == accepted  # every 202 delivered at least once
        await asyncio.sleep(2.5)  # past the ack wait: the leases held at the kill have run out
        # at-least-once: only the deliveries in flight at the kill (2 workers) may be sent twice
        assert sink.duplicates <= 2, sink.keys.most_common(5)
        assert await proc.metric("notification_dead_letters_total") == 0
        assert await proc.stop() == 0


class _ByEvent(FlakySink):
    """Also records which event each notification key belongs to (the generic payload is the event)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: dict[str, set[str]] = {}

    async def _handle(self, request: web.Request) -> web.Response:
        answer = await super()._handle(request)
        if answer.status == 200:
            name = json.loads(self.bodies[-1])["involvedObject"]["name"]
            self.events.setdefault(name, set()).add(request.headers.get("Idempotency-Key", ""))
        return answer


async def test_sigkill_in_the_middle_of_group_commits_keeps_every_202_and_splits_no_event(
    tmp_path: Path,
) -> None:
    """24 clients POST without pause, so the writer thread always has a batch of several events open (their
    admissions, the workers' leases and acks in one transaction); SIGKILL lands in one. Every 202 is then
    delivered; an event whose answer never came is delivered with both its notifications or not at all (one
    transaction, never half); duplicates only from the leases held at the kill (4 workers)."""
    async with _ByEvent() as sink:
        proc = controller(tmp_path, sink, "--provider-concurrency=4", alerts=2)
        await proc.start()
        sink.delay = 0.005  # delivery lags the POSTs: leases, acks and appends share the batches
        accepted: set[str] = set()
        unanswered: set[str] = set()
        killed = asyncio.Event()

        async def client(c: int) -> None:
            async with aiohttp.ClientSession() as session:
                for i in itertools.count():
                    name = f"c{c}-{i}"
                    try:
                        status = await post_event(session, proc.events_url, event(name))
                    except (aiohttp.ClientError, OSError):
                        unanswered.add(name)  # in flight at the kill: stored or not, not answered
                        return
                    (accepted if status == 202 else unanswered).add(name)
                    if killed.is_set():
                        return

        clients = [asyncio.create_task(client(c)) for c in range(24)]
        async with asyncio.timeout(60):
            while len(accepted) < 400:
                await asyncio.sleep(0.01)
        await proc.kill()
        killed.set()
        await asyncio.gather(*clients)
        assert unanswered, "no POST was in flight at the kill: nothing was proven"
        sink.delay = 0.0
        await proc.start()  # same file
        async with asyncio.timeout(90):
            while not all(len(sink.events.get(name, ())) == 2 for name in accepted):
                await asyncio.sleep(0.1)
        await asyncio.sleep(2.5)  # past the ack wait: the leases held at the kill have run out
        lost = [name for name in accepted if len(sink.events.get(name, ())) != 2]
        assert not lost, f"answered 202, not delivered: {lost[:5]}"
        halves = [name for name in unanswered if len(sink.events.get(name, ())) == 1]
        assert not halves, f"an event half stored: {halves[:5]}"
        assert set(sink.events) <= accepted | unanswered
        assert max(sink.keys.values()) <= 2
        assert sink.duplicates <= 4, sink.keys.most_common(6)
        assert await proc.stop() == 0


async def test_provider_down_longer_than_fluxs_15s_then_everything_arrives(tmp_path: Path) -> None:
    async with FlakySink() as sink:
        proc = controller(tmp_path, sink, "--circuit-breaker-threshold=1000")
        await proc.start()
        sink.failing = True
        assert await _post_all(proc.events_url, [f"outage{i}" for i in range(30)]) == [202] * 30
        await asyncio.sleep(16)  # Flux's retries are over after ~15 s: its notifications are gone
        assert sink.refused > 30  # retried all along
        depth = await proc.metric("notification_outbox_depth", provider="flux-system/sink")
        assert depth == 30
        assert await proc.metric("notification_outbox_oldest_age_seconds", provider="flux-system/sink") >= 15
        sink.failing = False
        await sink.wait_unique(30, timeout=20)
        assert sink.duplicates == 0
        # every refused attempt carried the key the successful one carried: a receiver can de-duplicate
        assert set(sink.refused_keys) == set(sink.keys)
        assert all(len(k) == 32 for k in sink.keys)
        assert await proc.metric("notification_redeliveries_total") >= 30
        await asyncio.sleep(1.5)  # the next poll of the store updates the gauges
        assert await proc.metric("notification_outbox_depth", provider="flux-system/sink") == 0
        assert await proc.stop() == 0


async def test_dead_letters_counted_evented_listed_and_replayed(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    async with FlakySink() as sink:
        proc = controller(tmp_path, sink, "--delivery-max-age=1s")
        await proc.start()
        sink.failing = True
        assert await _post_all(proc.events_url, ["doomed-a", "doomed-b"]) == [202, 202]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while await proc.metric("notification_dead_letters_total", reason="max-age") < 2:
            assert loop.time() < deadline, proc.log()
            await asyncio.sleep(0.2)
        log = proc.log()
        assert "kept as dead letter" in log and "down for maintenance" in log  # one line (its Event: debug)
        out = io.StringIO()
        assert (
            await asyncio.to_thread(dead_letters, ["list", "--store", f"sqlite:{db}", "-o", "json"], out) == 0
        )
        rows = json.loads(out.getvalue())
        assert sorted(r["object"] for r in rows) == [
            "Kustomization/flux-system/doomed-a",
            "Kustomization/flux-system/doomed-b",
        ]
        assert {r["alert"] for r in rows} == {"flux-system/all-0"} and {r["reason"] for r in rows} == {
            "max-age"
        }
        assert all("503" in r["error"] for r in rows)
        sink.failing = False
        out = io.StringIO()
        args = ["replay", "--store", f"sqlite:{db}", "--alert", "flux-system/all-0"]
        assert await asyncio.to_thread(dead_letters, args, out) == 0  # while the controller runs
        assert out.getvalue() == "replayed 2 dead letters\n"
        await sink.wait_unique(2, timeout=20)
        assert {json.loads(b)["involvedObject"]["name"] for b in sink.bodies} == {"doomed-a", "doomed-b"}
        assert await proc.stop() == 0


async def test_a_permanent_refusal_is_dead_lettered_at_once(tmp_path: Path) -> None:
    async with FlakySink() as sink:
        proc = controller(tmp_path, sink)
        await proc.start()
        sink.failing, sink.fail_status = True, 400
        assert await _post_all(proc.events_url, ["bad"]) == [202]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while await proc.metric("notification_dead_letters_total", reason="permanent") < 1:
            assert loop.time() < deadline, proc.log()
            await asyncio.sleep(0.1)
        assert sink.refused == 1  # a 400 is not retried
        assert await proc.stop() == 0


async def test_the_circuit_breaker_pauses_a_failing_provider(tmp_path: Path) -> None:
    async with FlakySink() as sink:
        proc = controller(tmp_path, sink, "--circuit-breaker-threshold=3", "--circuit-breaker-cooldown=3s")
        await proc.start()
        sink.failing = True
        assert await _post_all(proc.events_url, [f"x{i}" for i in range(10)]) == [202] * 10
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while await proc.metric("notification_circuit_breaker_open", provider="flux-system/sink") != 1:
            assert loop.time() < deadline, proc.log()
            await asyncio.sleep(0.1)
        before = sink.refused
        await asyncio.sleep(2)  # inside the cool-down: attempts stop (those in flight aside)
        assert sink.refused - before <= 16
        assert "DeliveryPaused" in proc.log()
        sink.failing = False
        await sink.wait_unique(10, timeout=20)  # the probe succeeds, the lane resumes
        while await proc.metric("notification_circuit_breaker_open", provider="flux-system/sink") != 0:
            assert loop.time() < deadline + 20
            await asyncio.sleep(0.1)
        assert "DeliveryResumed" in proc.log()
        assert await proc.stop() == 0


async def test_retry_after_from_the_provider_is_honoured_between_attempts(tmp_path: Path) -> None:
    """A 503 with ``Retry-After: 2`` is not retried for 2 s, though the backoff alone would retry in ~50 ms."""
    async with FlakySink() as sink:
        proc = controller(tmp_path, sink, "--circuit-breaker-threshold=1000")
        await proc.start()
        sink.failing, sink.retry_after = True, "2"
        assert await _post_all(proc.events_url, ["busy"]) == [202]
        await asyncio.sleep(3.2)
        # the outbound path's own in-delivery retry fits no 2 s wait in the 2 s timeout: one try per
        # attempt, and at most two attempts in 3.2 s (t=0 and t≥2), where the backoff would allow dozens
        assert 1 <= sink.refused <= 2, sink.refused
        sink.failing = False
        await sink.wait_unique(1, timeout=10)
        assert await proc.stop() == 0


async def test_a_paused_lane_shows_in_the_provider_status_and_clears_on_recovery(tmp_path: Path) -> None:
    from notification_controller.core import conditions as cond
    from notification_controller.settings import StoreSettings
    from tests.integration.appkit import post_event as post_to_app
    from tests.integration.appkit import running_app

    async with FlakySink() as sink:
        directory = manifests(tmp_path / "m", sink.url)
        settings = StoreSettings(
            url=f"sqlite:{tmp_path / 'state.db'}",
            retry_base=0.05,
            retry_cap=0.2,
            breaker_threshold=2,
            breaker_cooldown=1.0,
        )
        async with running_app(directory, store=settings) as app:
            while not app.ready():  # the store opens in the background: 503 until then
                await asyncio.sleep(0.02)
            sink.failing = True
            for i in range(3):
                resp = await post_to_app(app, json.dumps(event(f"p{i}")).encode())
                assert resp.status == 202

            def delivering() -> tuple[str, str] | None:
                provider = app.store.provider("flux-system", "sink")
                assert provider is not None
                found = cond.find(provider.status.conditions, "Delivering")
                return None if found is None else (found.status, found.reason)

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while delivering() != ("False", "DeliveryPaused"):
                assert loop.time() < deadline, delivering()
                await asyncio.sleep(0.05)
            provider = app.store.provider("flux-system", "sink")
            assert provider is not None and cond.is_ready(provider.status.conditions)  # its config is fine
            sink.failing = False
            await sink.wait_unique(3, timeout=15)
            while delivering() is not None:
                assert loop.time() < deadline + 15, delivering()
                await asyncio.sleep(0.05)

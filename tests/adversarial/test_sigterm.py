"""SIGTERM during a burst (checklist H1, E12; issue 7 "Process"; app.py shutdown sequence).

The controller runs as users run it (``python -m notification_controller`` on a manifests directory, as in
``tests/integration/test_process.py``) against a slow provider. After SIGTERM: readiness goes false, the
event listener answers 503 and then refuses connections, deliveries in flight and queued ones are drained
within ``--shutdown-grace-period``, and the process exits 0. When the grace period is too short, what is cut
off (queued *and* in flight) is logged as abandoned and counted once in
``notification_dropped_total{reason="shutdown"}``: every accepted notification ends up delivered, failed or
dropped — never silently lost (semantics as Flux: at-most-once, see README "Compatibility").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from notification_controller.settings import EventSettings
from tests.adversarial.kit import event_body, eventually, pair
from tests.integration.appkit import metric, post_event, running_app
from tests.support.capture import CaptureServer, Reply
from tests.support.ports import listener_ports

ROOT = Path(__file__).resolve().parents[2]
ABANDONED = re.compile(r"shutdown complete \((\d+) (?:queued )?notifications abandoned\)")
DETAIL = re.compile(r"shutdown abandoned (\d+) notifications \((\d+) queued, (\d+) in flight\)")


def unmatched_event() -> bytes:
    """An event no Alert takes (a GitRepository): probes the listener without adding notifications."""
    return event_body("probe").replace(b'"kind":"Kustomization"', b'"kind":"GitRepository"')


@dataclass
class Controller:
    proc: asyncio.subprocess.Process
    ports: dict[str, int]

    def url(self, name: str, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[name]}{path}"


async def start(manifests: Path, *flags: str) -> Controller:
    ports = listener_ports()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "notification_controller",
        "--manifests",
        str(manifests),
        f"--events-addr=127.0.0.1:{ports['events']}",
        f"--receiverAddr=127.0.0.1:{ports['receiver']}",
        f"--metrics-addr=127.0.0.1:{ports['metrics']}",
        f"--health-addr=127.0.0.1:{ports['health']}",
        "--log-encoding=json",
        *flags,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    controller = Controller(proc, ports)
    async with aiohttp.ClientSession() as session:

        async def ready() -> bool:
            try:
                async with session.get(controller.url("health", "/readyz")) as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(ready, timeout=20, what="the controller to be ready")
    return controller


async def post(session: aiohttp.ClientSession, url: str, body: bytes) -> int:
    """Status of a POST, or 0 when the connection is refused or dropped."""
    try:
        async with session.post(url, data=body) as resp:
            return resp.status
    except aiohttp.ClientError:
        return 0


async def sigterm_and_watch_listener(controller: Controller) -> list[int]:
    """Send SIGTERM, then probe the event listener until the process exits: 202 until the signal is
    handled, then only 503 or refused."""
    controller.proc.send_signal(signal.SIGTERM)
    statuses: list[int] = []
    async with aiohttp.ClientSession() as session:
        while controller.proc.returncode is None:
            statuses.append(await post(session, controller.url("events"), unmatched_event()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(controller.proc.wait()), 0.05)
    return statuses


def log_lines(stderr: bytes) -> list[str]:
    out = []
    for line in stderr.decode().splitlines():
        try:
            out.append(str(json.loads(line)["msg"]))
        except (ValueError, KeyError):
            out.append(line)
    return out


def assert_listener_stopped(statuses: list[int]) -> None:
    assert statuses, "the listener was never probed"
    first_refusal = next(i for i, s in enumerate(statuses) if s != 202)
    assert set(statuses[first_refusal:]) <= {503, 0}, statuses
    assert statuses[-1] in (503, 0)


@pytest.mark.slow
async def test_sigterm_drains_in_flight_and_queued_deliveries_within_the_grace_period(tmp_path: Path) -> None:
    """6 notifications, 2 at a time, 1 s each: SIGTERM while 2 are in flight → all 6 delivered (3 s < 10 s
    grace), listener stopped, exit 0, nothing abandoned."""
    async with CaptureServer() as sink:
        sink.on("POST", ".*", Reply(delay=1.0))
        (tmp_path / "objects.yaml").write_text(pair("slow", "generic", f"{sink.url}/slow"))
        controller = await start(tmp_path, "--provider-concurrency=2", "--shutdown-grace-period=10s")
        try:
            async with aiohttp.ClientSession() as session:
                for i in range(6):
                    assert await post(session, controller.url("events"), event_body(f"burst {i}")) == 202
            await sink.wait_for(2, timeout=5)
            loop = asyncio.get_running_loop()
            start_time = loop.time()
            statuses = await sigterm_and_watch_listener(controller)
            stopped_after = loop.time() - start_time
        finally:
            if controller.proc.returncode is None:
                controller.proc.kill()
            _, stderr = await controller.proc.communicate()
        assert controller.proc.returncode == 0, stderr.decode()[-2000:]
        assert len(sink.requests) == 6
        assert stopped_after < 10
    assert_listener_stopped(statuses)
    lines = log_lines(stderr)
    [done] = [m for line in lines if (m := ABANDONED.search(line))]
    assert done.group(1) == "0"
    assert not [line for line in lines if DETAIL.search(line)]


@pytest.mark.slow
async def test_sigterm_past_the_grace_period_counts_what_it_abandons(tmp_path: Path) -> None:
    """4 notifications, 1 at a time, 5 s each, grace 1 s: the one in flight is cut off and 3 are still
    queued → 4 abandoned, logged with the split; exit 0 about 1 s after SIGTERM."""
    async with CaptureServer() as sink:
        sink.on("POST", ".*", Reply(delay=5.0))
        (tmp_path / "objects.yaml").write_text(pair("slow", "generic", f"{sink.url}/slow"))
        controller = await start(tmp_path, "--provider-concurrency=1", "--shutdown-grace-period=1s")
        try:
            async with aiohttp.ClientSession() as session:
                for i in range(4):
                    assert await post(session, controller.url("events"), event_body(f"burst {i}")) == 202
            await sink.wait_for(1, timeout=5)
            loop = asyncio.get_running_loop()
            start_time = loop.time()
            statuses = await sigterm_and_watch_listener(controller)
            stopped_after = loop.time() - start_time
        finally:
            if controller.proc.returncode is None:
                controller.proc.kill()
            _, stderr = await controller.proc.communicate()
        assert controller.proc.returncode == 0, stderr.decode()[-2000:]
        assert len(sink.requests) == 1
        assert stopped_after < 4.0
    assert_listener_stopped(statuses)
    lines = log_lines(stderr)
    [detail] = [m for line in lines if (m := DETAIL.search(line))]
    assert detail.groups() == ("4", "3", "1")
    [done] = [m for line in lines if (m := ABANDONED.search(line))]
    assert done.group(1) == "4"


async def test_abandoned_count_equals_the_shutdown_drop_metric(tmp_path: Path) -> None:
    """The same cut-off in process, where the registry can be read after ``stop()``: the abandoned
    notifications are exactly ``notification_dropped_total{reason="shutdown"}``; nothing is delivered
    twice or lost between the counters; the pending gauge is back to 0."""
    async with CaptureServer() as sink:
        sink.on("POST", ".*", Reply(delay=5.0))
        (tmp_path / "objects.yaml").write_text(pair("slow", "generic", f"{sink.url}/slow"))
        async with running_app(tmp_path, grace=0.3, events=EventSettings(provider_concurrency=2)) as app:
            for i in range(7):
                assert (await post_event(app, event_body(f"burst {i}"))).status == 202
            await sink.wait_for(2, timeout=5)  # two in flight, five queued
        # leaving the context ran app.stop(): 7 accepted, none delivered within 0.3 s
    handed = metric(app, "notification_notifications_total", provider_type="generic")
    dropped = metric(app, "notification_dropped_total", provider_type="generic", reason="shutdown")
    delivered = metric(app, "notification_delivered_total", provider_type="generic")
    assert (handed, delivered, dropped) == (7, 0, 7)
    assert metric(app, "notification_pending") == 0

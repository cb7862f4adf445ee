"""Real controller processes and a provider sink that fails on demand, for the durable-delivery fault tests.

``ControllerProcess`` runs ``python -m notification_controller`` in local mode on free ports; it can be
SIGKILLed and started again with the same arguments (same store, new ports unless told otherwise).
``FlakySink`` is an HTTP provider endpoint that answers 503 while ``failing`` is set (or a scripted status),
and records every request with its ``Idempotency-Key``: ``unique`` counts notifications, ``duplicates``
counts redeliveries of one, so a test can state "all delivered at least once; N duplicates".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp
from aiohttp import web

from tests.support.ports import free_port, listener_ports

ROOT = Path(__file__).resolve().parents[2]
LOCALHOST = "127.0.0.1"


def manifests(directory: Path, sink_url: str, *, alerts: int = 1, timeout: str = "2s") -> Path:
    """A Provider (generic) at ``sink_url`` and ``alerts`` Alerts on every Kustomization in flux-system."""
    directory.mkdir(parents=True, exist_ok=True)
    docs = [
        f"""apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: flux-system}}
spec: {{type: generic, address: "{sink_url}", timeout: {timeout}}}
"""
    ]
    docs += [
        f"""apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: all-{i}, namespace: flux-system}}
spec:
  providerRef: {{name: sink}}
  eventSeverity: info
  eventSources: [{{kind: Kustomization, name: "*"}}]
"""
        for i in range(alerts)
    ]
    (directory / "manifests.yaml").write_text("---\n".join(docs), encoding="utf-8")
    return directory


def event(
    name: str, message: str = "Reconciliation finished", reason: str = "ReconciliationSucceeded"
) -> dict[str, Any]:
    return {
        "involvedObject": {
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": name,
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        },
        "severity": "info",
        "timestamp": "2026-11-22T10:00:00Z",
        "message": message,
        "reason": reason,
        "reportingController": "kustomize-controller",
    }


@dataclass
class ControllerProcess:
    manifests: Path
    args: list[str] = field(default_factory=list)
    log_path: Path | None = None
    ports: dict[str, int] = field(default_factory=dict)
    proc: asyncio.subprocess.Process | None = None

    @property
    def events_url(self) -> str:
        return f"http://{LOCALHOST}:{self.ports['events']}/"

    @property
    def receiver_url(self) -> str:
        return f"http://{LOCALHOST}:{self.ports['receiver']}"

    @property
    def metrics_url(self) -> str:
        return f"http://{LOCALHOST}:{self.ports['metrics']}/metrics"

    @property
    def ready_url(self) -> str:
        return f"http://{LOCALHOST}:{self.ports['health']}/readyz"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, *, wait_ready: bool = True, timeout: float = 30.0) -> None:
        self.ports = listener_ports()
        log = open(self.log_path, "ab") if self.log_path else asyncio.subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "notification_controller",
                "--manifests",
                str(self.manifests),
                f"--events-addr={LOCALHOST}:{self.ports['events']}",
                f"--receiverAddr={LOCALHOST}:{self.ports['receiver']}",
                f"--metrics-addr={LOCALHOST}:{self.ports['metrics']}",
                f"--health-addr={LOCALHOST}:{self.ports['health']}",
                "--log-encoding=json",
                *self.args,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=log,
                stderr=log,
            )
        finally:
            if self.log_path:
                log.close()  # type: ignore[union-attr]
        if wait_ready:
            await self.wait_ready(timeout)

    async def wait_ready(self, timeout: float = 30.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with aiohttp.ClientSession() as session:
            while loop.time() < deadline:
                assert self.proc is not None and self.proc.returncode is None, (
                    f"controller exited: {self.log()}"
                )
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(self.ready_url) as resp:
                        if resp.status == 200:
                            return
                await asyncio.sleep(0.1)
        raise AssertionError(f"{self.ready_url} never became ready: {self.log()}")

    def log(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    async def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, nothing is flushed."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.returncode is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(40):
                return await self.proc.wait()
        except TimeoutError:
            await self.kill()
            return -9

    async def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        async with aiohttp.ClientSession() as session, session.get(self.metrics_url) as resp:
            text = await resp.text()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, rest = head.partition("{")
            if metric != name:
                continue
            if all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += float(value)
        return total


async def post_event(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> int:
    async with session.post(url, json=body) as resp:
        await resp.read()
        return resp.status


class FlakySink:
    """A provider endpoint: records requests and Idempotency-Keys; answers ``status`` (200 unless failing)."""

    def __init__(self) -> None:
        self.failing = False
        self.delay = 0.0  # seconds each answer takes (deliveries stay in flight)
        self.fail_status = 503
        self.retry_after: str | None = None
        self.keys: Counter[str] = Counter()
        self.refused_keys: Counter[str] = Counter()
        self.bodies: list[bytes] = []
        self.refused = 0
        self.arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.failing:
            self.refused += 1
            self.refused_keys[request.headers.get("Idempotency-Key", "")] += 1
            headers = {"Retry-After": self.retry_after} if self.retry_after else None
            return web.Response(status=self.fail_status, text="down for maintenance", headers=headers)
        self.keys[request.headers.get("Idempotency-Key", "")] += 1
        self.bodies.append(body)
        async with self.arrived:
            self.arrived.notify_all()
        return web.Response(status=200, text="ok")

    @property
    def unique(self) -> int:
        return len(self.keys)

    @property
    def duplicates(self) -> int:
        return sum(self.keys.values()) - len(self.keys)

    async def wait_unique(self, n: int, timeout: float) -> None:
        async with asyncio.timeout(timeout), self.arrived:
            await self.arrived.wait_for(lambda: self.unique >= n)

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, LOCALHOST, port).start()
        self.url = f"http://{LOCALHOST}:{port}/hook"
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

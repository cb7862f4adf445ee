"""A pre-dispatch hook that is down must not silence its Alerts when it says ``failurePolicy: Ignore``
(issue 25 item 6; docs/hooks.md, "Failure policy").

The real controller process (local mode, ``python -m notification_controller``) serves four Alerts on one
Provider (a ``FlakySink``), each on its own Kustomization and with one pre-dispatch hook:

* ``stopped``: ``failurePolicy: Ignore``, the hook's port is closed (connection refused);
* ``broken``: ``failurePolicy: Ignore``, the hook answers 500 to every call (retried inside its timeout);
* ``slow``: ``failurePolicy: Ignore``, the hook answers after its 1 s timeout;
* ``strict``: no policy (the default, ``Fail``), the hook's port is closed.

Asserted at the sink and on ``/metrics``: the three ``Ignore`` notifications arrive with their message
unchanged and each call is counted ``outcome="ignored"``; the ``Fail`` one never arrives, is counted
``outcome="error"`` and ``notification_dropped_total{reason="hook"}``. Without the policy (before issue 25)
all four were dropped.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.controllers import ControllerProcess, FlakySink, event, post_event
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(120)

LOCALHOST = "127.0.0.1"
HOOK_TIMEOUT = "1s"
IGNORED = ("stopped", "broken", "slow")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def hook_server() -> AsyncIterator[tuple[str, str, list[str]]]:
    """One server, two hooks: ``/broken`` answers 500, ``/slow`` answers after the hook's timeout."""
    calls: list[str] = []

    async def broken(request: web.Request) -> web.Response:
        await request.read()
        calls.append("broken")
        return web.json_response({"message": "enricher database down"}, status=500)

    async def slow(request: web.Request) -> web.Response:
        await request.read()
        calls.append("slow")
        await asyncio.sleep(5)
        return web.json_response({"event": {"message": "rewritten too late"}})

    app = web.Application()
    app.router.add_post("/broken", broken)
    app.router.add_post("/slow", slow)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, LOCALHOST, port).start()
    try:
        yield f"http://{LOCALHOST}:{port}/broken", f"http://{LOCALHOST}:{port}/slow", calls
    finally:
        await runner.cleanup()


def alert(name: str, hook_url: str, policy: str | None) -> str:
    line = f"\n      failurePolicy: {policy}" if policy else ""
    return f"""---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: flux-system}}
spec:
  providerRef: {{name: sink}}
  eventSeverity: info
  eventSources: [{{kind: Kustomization, name: {name}}}]
  hooks:
    - name: enrich-{name}
      address: {{uri: "{hook_url}"}}
      timeout: {HOOK_TIMEOUT}
      capabilities: [pre-dispatch]{line}
"""


async def test_ignore_lets_notifications_through_and_fail_drops(tmp_path: Path) -> None:
    async with FlakySink() as sink, hook_server() as (broken_url, slow_url, calls):
        refused = f"http://{LOCALHOST}:{closed_port()}/hook"
        docs = f"""apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: flux-system}}
spec: {{type: generic, address: "{sink.url}", timeout: 5s}}
"""
        docs += alert("stopped", refused, "Ignore")
        docs += alert("broken", broken_url, "Ignore")
        docs += alert("slow", slow_url, "Ignore")
        docs += alert("strict", refused, None)
        manifests = tmp_path / "manifests"
        manifests.mkdir()
        (manifests / "all.yaml").write_text(docs, encoding="utf-8")
        controller = ControllerProcess(manifests, log_path=tmp_path / "controller.log")
        await controller.start()
        try:
            async with aiohttp.ClientSession() as session:
                for name in (*IGNORED, "strict"):
                    status = await post_event(
                        session, controller.events_url, event(name, message=f"deployed {name}")
                    )
                    assert status == 202, controller.log()
            async with asyncio.timeout(30), sink.arrived:  # no outbox: no Idempotency-Key to count
                await sink.arrived.wait_for(lambda: len(sink.bodies) >= len(IGNORED))

            async def settled() -> bool:
                dropped = await controller.metric("notification_dropped_total", reason="hook")
                ignored = await controller.metric("notification_hook_calls_total", outcome="ignored")
                return dropped >= 1 and ignored >= len(IGNORED)

            async with asyncio.timeout(30):
                while not await settled():
                    await asyncio.sleep(0.1)

            received = sorted(json.loads(body)["involvedObject"]["name"] for body in sink.bodies)
            assert received == sorted(IGNORED), controller.log()
            messages = {json.loads(body)["message"] for body in sink.bodies}
            assert messages == {f"deployed {name}" for name in IGNORED}  # through unchanged
            for name in IGNORED:
                got = await controller.metric(
                    "notification_hook_calls_total", hook=f"enrich-{name}", outcome="ignored"
                )
                assert got == 1, (name, controller.log())
            assert (
                await controller.metric(
                    "notification_hook_calls_total", hook="enrich-strict", outcome="error"
                )
                == 1
            )
            assert await controller.metric("notification_dropped_total", reason="hook") == 1
            assert "broken" in calls and "slow" in calls  # the servers were really asked
            # The Fail notification does not arrive later either.
            await asyncio.sleep(0.5)
            assert len(sink.bodies) == len(IGNORED)
        finally:
            await controller.stop()

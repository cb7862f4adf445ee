"""``notification_delivery_latency_seconds`` (issue 28 item 3): event received → delivered, measured by the real
controller against real sinks.

The clock starts when the event server hands the event to the dispatcher (``Notification.received_at``), not
when an attempt starts: the wait in the queue, a durable outbox's retries and a controller restart in between
are all in it (``notification_delivery_duration_seconds`` measures the attempts). A notification that is not
delivered (failed, dead-lettered) is not observed: its failure is counted where it always was.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from tests.integration.appkit import metric, post_event, running_app, write
from tests.support.capture import CaptureServer, Reply
from tests.support.controllers import ControllerProcess, FlakySink, event, manifests
from tests.support.controllers import post_event as post_to

LATENCY = "notification_delivery_latency_seconds"
EVENT = (Path(__file__).resolve().parents[2] / "examples" / "event.json").read_bytes()


async def eventually(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_latency_is_observed_per_provider_type_for_deliveries_only(tmp_path: Path) -> None:
    async with CaptureServer() as sink:
        sink.on("POST", "/slow", Reply(200, {}, delay=0.3))
        sink.on("POST", "/fail", Reply(500, {"error": "down"}))
        write(
            tmp_path,
            "objects.yaml",
            f"""\
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: slow, namespace: flux-system}}
            spec: {{type: generic, address: "{sink.url}/slow"}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {{name: slow, namespace: flux-system}}
            spec:
              providerRef: {{name: slow}}
              eventSources: [{{kind: Kustomization, name: '*'}}]
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: failing, namespace: flux-system}}
            spec: {{type: slack, address: "{sink.url}/fail"}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {{name: failing, namespace: flux-system}}
            spec:
              providerRef: {{name: failing}}
              eventSources: [{{kind: Kustomization, name: '*'}}]
            """,
        )
        async with running_app(tmp_path) as app:
            await eventually(lambda: app.store.alert("flux-system", "failing") is not None, "the Alerts")
            assert (await post_event(app, EVENT)).status == 202
            await eventually(lambda: metric(app, f"{LATENCY}_count", provider_type="generic") == 1, "one")
            await eventually(
                lambda: metric(app, "notification_delivery_failed_total", provider_type="slack") >= 1,
                "the failure",
            )
            assert metric(app, f"{LATENCY}_sum", provider_type="generic") >= 0.3  # the provider's 300 ms
            assert metric(app, f"{LATENCY}_bucket", provider_type="generic", le="0.25") == 0
            assert metric(app, f"{LATENCY}_bucket", provider_type="generic", le="300.0") == 1
            # a failed delivery is not a latency (notification_delivery_failed_total has it)
            assert metric(app, f"{LATENCY}_count", provider_type="slack") == 0


async def test_latency_spans_the_durable_outbox_and_a_controller_restart(tmp_path: Path) -> None:
    """The receipt is stored with the notification: after a SIGKILL and a restart the latency observed is
    the time since the POST, outage included, not the time since the new process read it."""
    async with FlakySink() as sink:
        proc = ControllerProcess(
            manifests(tmp_path / "manifests", sink.url),
            [
                f"--store=sqlite:{tmp_path / 'state.db'}",
                "--delivery-retry-base=100ms",
                "--delivery-retry-cap=300ms",
                "--store-ack-wait=1s",
                "--circuit-breaker-threshold=1000",
            ],
            log_path=tmp_path / "controller.log",
        )
        sink.failing = True
        await proc.start()
        try:
            posted = time.monotonic()
            async with aiohttp.ClientSession() as session:
                assert await post_to(session, proc.events_url, event("app")) == 202
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while sink.refused < 2:  # retried in the outbox
                assert loop.time() < deadline, proc.log()
                await asyncio.sleep(0.05)
            await proc.kill()
            await asyncio.sleep(1.0)  # down: still not delivered
            sink.failing = False
            await proc.start()
            await sink.wait_unique(1, timeout=30)
            waited = time.monotonic() - posted
            deadline = loop.time() + 10
            while await proc.metric(f"{LATENCY}_count", provider_type="generic") < 1:
                assert loop.time() < deadline, proc.log()
                await asyncio.sleep(0.1)
            observed = await proc.metric(f"{LATENCY}_sum", provider_type="generic")
            assert waited - 0.5 <= observed <= waited + 0.5, (observed, waited)
            assert observed >= 1.0  # the outage and the restart, not only the last attempt
            assert await proc.metric(f"{LATENCY}_count", provider_type="generic") == 1
        finally:
            assert await proc.stop() == 0

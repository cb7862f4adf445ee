"""Hooks API v1 in local mode: the real controller (``App``) on a manifests directory, real hook servers.

The ``pre-dispatch`` hook is the example service itself (``examples/hooks/enricher.py``), so this also proves
the example runs: it adds a runbook link and vetoes info notifications outside office hours. A controller-wide
hook comes from a ``--hooks-config`` file and runs before the Alert's. The ``pre-reconcile`` phase runs in
local mode too (a Receiver made ``Ready=False`` by its hook). Issue 8, docs/hooks.md; the event path around
the hooks is reference §2-§3.6.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from aiohttp import web

from notification_controller.api.hooks import HOOKS_FINALIZER
from notification_controller.app import App
from notification_controller.settings import ServerSettings, Settings
from tests.integration.appkit import FAST_RETRY, local_cluster, metric, post_event, write
from tests.support.capture import CapturedRequest, CaptureServer, Reply

REPO = Path(__file__).resolve().parents[2]
EVENT = (REPO / "examples" / "event.json").read_bytes()
TUESDAY_10 = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
SATURDAY_10 = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


def load_enricher() -> ModuleType:
    """examples/hooks/enricher.py, imported from its path (examples/ is not a package)."""
    name = "hooks_example_enricher"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "examples/hooks/enricher.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server: Any = site._server
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def hooked_app(manifests: Path, hooks_config: Path | None = None) -> AsyncIterator[App]:
    settings = Settings(
        server=ServerSettings(
            events_addr="127.0.0.1:0",
            receiver_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            health_addr="127.0.0.1:0",
            shutdown_grace=5.0,
        ),
        manifests=manifests,
        manifests_poll_interval=0.1,
        hooks_config=hooks_config,
    )
    app = App(settings, retry=FAST_RETRY)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


def notifications(tmp: Path, sink: str, hook_url: str) -> Path:
    write(
        tmp,
        "notifications.yaml",
        f"""\
        apiVersion: v1
        kind: Secret
        metadata: {{name: enricher-hmac, namespace: flux-system}}
        stringData: {{token: local-hook-key}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: sink, namespace: flux-system}}
        spec: {{type: generic, address: {sink}/flux}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata:
          name: all
          namespace: flux-system
          labels: {{runbooks.example.com/page: deployments}}
        spec:
          providerRef: {{name: sink}}
          eventSources: [{{kind: Kustomization, name: '*'}}]
          eventMetadata: {{cluster: local, runbook_base: 'https://runbooks.example.com/flux'}}
          hooks:
            - name: enricher
              address: {{uri: {hook_url}/hook}}
              timeout: PT5S
              capabilities: [pre-dispatch]
              secretRef: {{name: enricher-hmac}}
        """,
    )
    return tmp


def wide_config(tmp: Path, url: str) -> Path:
    path = tmp / "hooks-config.yaml"
    path.write_text(
        f"hooks:\n- name: stamp\n  address: {{uri: '{url}/hook'}}\n  capabilities: [pre-dispatch]\n  kinds: [Alert]\n"
    )
    return path


def stamp(request: CapturedRequest) -> Reply:
    event = request.json()["event"]
    return Reply(
        body={"event": {"metadata": {**event.get("metadata", {}), "stamped": "by-controller-wide-hook"}}}
    )


async def test_example_enricher_and_controller_wide_hook_shape_the_notification(tmp_path: Path) -> None:
    enricher = load_enricher()
    settings = enricher.Settings(hmac_key=b"local-hook-key", now=lambda: TUESDAY_10)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    async with (
        CaptureServer() as sink,
        CaptureServer() as wide,
        serve(enricher.create_app(settings)) as hook_url,
    ):
        wide.on("POST", "/hook", stamp)
        async with hooked_app(
            notifications(manifests, sink.url, hook_url), wide_config(tmp_path, wide.url)
        ) as app:
            assert (await post_event(app, EVENT)).status == 202
            [delivered] = await sink.wait_for(1)
            body = delivered.json()
            assert body["metadata"] == {
                "cluster": "local",
                "revision": "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41",
                "stamped": "by-controller-wide-hook",  # the controller-wide hook ran first ...
                "runbook": "https://runbooks.example.com/flux/deployments",  # ... then the Alert's
            }
            assert wide.requests[0].json()["alert"]["metadata"]["name"] == "all"
            assert await app.dispatcher.wait_idle(5)
            labels = {"phase": "pre-dispatch", "hook": "enricher", "outcome": "changed"}
            assert app.registry.get_sample_value("notification_hook_calls_total", labels) == 1


async def test_example_enricher_vetoes_outside_office_hours(tmp_path: Path) -> None:
    enricher = load_enricher()
    settings = enricher.Settings(hmac_key=b"local-hook-key", now=lambda: SATURDAY_10)
    async with CaptureServer() as sink, serve(enricher.create_app(settings)) as hook_url:
        async with hooked_app(notifications(tmp_path, sink.url, hook_url)) as app:
            assert (await post_event(app, EVENT)).status == 202
            error = json.loads(EVENT)
            error["severity"], error["message"] = "error", "Health check failed"
            assert (await post_event(app, json.dumps(error).encode())).status == 202
            [delivered] = await sink.wait_for(1)  # errors always go through
            assert delivered.json()["message"] == "Health check failed"
            assert await app.dispatcher.wait_idle(5)
            assert len(sink.requests) == 1
            assert metric(app, "notification_dropped_total", provider_type="generic", reason="hook") == 1
            events = [e for e in local_cluster(app).events if e[2] == "NotificationDropped"]
            assert [(ref.kind, ref.name, type_) for ref, type_, _, _ in events] == [
                ("Alert", "all", "Warning")
            ]
            assert "outside office hours (09:00-18:00 UTC)" in events[0][3]


async def test_pre_reconcile_hook_sets_a_receiver_not_ready_in_local_mode(tmp_path: Path) -> None:
    async with CaptureServer() as hook:
        hook.on(
            "POST",
            "/hook",
            Reply(
                body={
                    "object": {
                        "status": {
                            "conditions": [
                                {
                                    "type": "Registered",
                                    "status": "False",
                                    "reason": "Pending",
                                    "message": "not yet",
                                }
                            ]
                        }
                    }
                }
            ),
        )
        write(
            tmp_path,
            "receiver.yaml",
            f"""\
            apiVersion: v1
            kind: Secret
            metadata: {{name: token, namespace: flux-system}}
            stringData: {{token: local-receiver-token}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1
            kind: Receiver
            metadata: {{name: gh, namespace: flux-system}}
            spec:
              type: generic
              resources: [{{kind: GitRepository, name: app}}]
              secretRef: {{name: token}}
              hooks:
                - {{name: register, address: {{uri: '{hook.url}/hook'}}, capabilities: [pre-reconcile]}}
            """,
        )
        async with hooked_app(tmp_path) as app:
            cluster = local_cluster(app)
            key = ("Receiver", "flux-system", "gh")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            ready: dict[str, Any] = {}
            while loop.time() < deadline:
                conditions = cluster.statuses.get(key, {}).get("conditions", [])
                ready = next((c for c in conditions if c["type"] == "Ready"), {})
                if ready:
                    break
                await asyncio.sleep(0.02)
            assert (ready.get("status"), ready.get("reason"), ready.get("message")) == (
                "False",
                "Pending",
                "not yet",
            )
            body = hook.requests[0].json()
            assert body["phase"] == "pre-reconcile"
            assert body["children"]["webhookPath"].startswith("/hook/")


async def test_finalize_hook_holds_a_removed_manifest_in_local_mode(tmp_path: Path) -> None:
    """Issue 8: all three phases in local mode. Deleting the file is the deletion; the object stays (being
    deleted) until the finalize hook answers 2xx."""
    state = {"done": False}

    def answer(request: CapturedRequest) -> Reply:
        if state["done"]:
            return Reply(body={})
        return Reply(503, {"message": "still cleaning up"})

    async with CaptureServer() as hook:
        hook.on("POST", "/hook", answer)
        path = write(
            tmp_path,
            "provider.yaml",
            f"""\
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: sink, namespace: flux-system}}
            spec:
              type: generic
              address: http://127.0.0.1:1/
              hooks:
                - {{name: cleanup, address: {{uri: '{hook.url}/hook'}}, capabilities: [finalize]}}
            """,
        )
        async with hooked_app(tmp_path) as app:

            async def until(predicate: Callable[[], bool]) -> None:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while not predicate():
                    assert loop.time() < deadline, "condition not reached"
                    await asyncio.sleep(0.02)

            def finalizers() -> list[str]:
                obj = app.store.provider("flux-system", "sink")
                return obj.metadata.finalizers if obj is not None else []

            await until(lambda: HOOKS_FINALIZER in finalizers())
            path.unlink()
            await until(lambda: sum(1 for r in hook.requests if r.json()["phase"] == "finalize") >= 2)
            held = app.store.provider("flux-system", "sink")
            assert held is not None and held.metadata.deletion_timestamp is not None
            state["done"] = True
            await until(lambda: app.store.provider("flux-system", "sink") is None)

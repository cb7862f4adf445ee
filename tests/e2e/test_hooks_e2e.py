"""Hooks API v1 on the real kube-apiserver (issue 8's required e2e test, docs/hooks.md).

The controller runs in-process in Kubernetes mode (informers, ``KubeCluster``) with the ServiceAccount
kubeconfig of ``config/rbac`` (so the RBAC is proven sufficient, ``services: get`` included), against the
CRDs generated with ``spec.hooks``. A real hook server on 127.0.0.1 answers. Asserted: a Receiver
``pre-reconcile`` hook that reports a non-True condition makes it ``Ready=False`` with that message (and
Ready again once the hook reports True); a ``finalize`` hook blocks the deletion until it answers 2xx.
Reference §6.3 for the Receiver's own status.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from notification_controller.api.hooks import HOOKS_FINALIZER
from notification_controller.app import App
from notification_controller.settings import KubeSettings, ServerSettings, Settings
from tests.e2e.apiserver import KubeTestServer
from tests.support.capture import CapturedRequest, CaptureServer, Reply

pytestmark = pytest.mark.e2e


async def kubectl(kube: KubeTestServer, *args: str, stdin: str | None = None) -> str:
    """kubectl off the event loop (the controller under test runs on it)."""
    proc = await asyncio.to_thread(kube.kubectl, *args, input=stdin)
    return str(proc.stdout) if proc.returncode == 0 else ""


async def get(kube: KubeTestServer, namespace: str, name: str) -> dict[str, Any] | None:
    out = await kubectl(kube, "get", "receiver", name, "-n", namespace, "-o", "json")
    return json.loads(out) if out else None


async def eventually(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}")


def ready_of(obj: dict[str, Any] | None) -> tuple[str, str, str] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition["status"], condition["reason"], condition.get("message", "")
    return None


@asynccontextmanager
async def controller(kubeconfig: Path, namespace: str) -> AsyncIterator[App]:
    settings = Settings(
        server=ServerSettings(
            events_addr="127.0.0.1:0",
            receiver_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            health_addr="127.0.0.1:0",
            shutdown_grace=2.0,
        ),
        kube=KubeSettings(
            kubeconfig=str(kubeconfig),
            watch_all_namespaces=False,
            runtime_namespace=namespace,
            min_retry_delay=0.2,
            max_retry_delay=1.0,
            resync_interval=30.0,
        ),
    )
    app = await App.create(settings)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


async def test_receiver_pre_reconcile_and_finalize_hooks(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str
) -> None:
    state = {"registered": False, "unregistered": False}

    def answer(request: CapturedRequest) -> Reply:
        body = request.json()
        if body["phase"] == "finalize":
            if state["unregistered"]:
                return Reply(body={})
            return Reply(503, {"message": "still unregistering the webhook"})
        if state["registered"]:
            condition = {
                "type": "GitHubWebhook",
                "status": "True",
                "reason": "Registered",
                "message": "id 42",
            }
        else:
            condition = {
                "type": "GitHubWebhook",
                "status": "False",
                "reason": "Registering",
                "message": "creating the GitHub webhook",
            }
        return Reply(body={"object": {"status": {"conditions": [condition]}}})

    async with CaptureServer() as hook, controller(sa_kubeconfig, namespace):
        hook.on("POST", "/hook", answer)
        await kubectl(
            installed,
            "apply",
            "--validate=false",
            "-f",
            "-",
            stdin=textwrap.dedent(
                f"""\
                apiVersion: v1
                kind: Secret
                metadata: {{name: token, namespace: {namespace}}}
                stringData: {{token: e2e-hook-token}}
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1
                kind: Receiver
                metadata: {{name: gh, namespace: {namespace}}}
                spec:
                  type: github
                  secretRef: {{name: token}}
                  resources: [{{kind: GitRepository, name: app}}]
                  hooks:
                    - name: github
                      version: v1
                      address: {{uri: '{hook.url}/hook'}}
                      timeout: PT5S
                      capabilities: [pre-reconcile, finalize]
                """
            ),
        )

        async def not_ready() -> Any:
            obj = await get(installed, namespace, "gh")
            return ready_of(obj) == ("False", "Registering", "creating the GitHub webhook") and obj

        obj = await eventually(not_ready, "Ready=False from the hook")
        assert obj["spec"]["hooks"][0]["capabilities"] == ["pre-reconcile", "finalize"]  # stored, not pruned
        assert HOOKS_FINALIZER in obj["metadata"]["finalizers"]
        conditions = {c["type"]: c for c in obj["status"]["conditions"]}
        assert conditions["GitHubWebhook"]["status"] == "False"
        assert conditions["Ready"]["observedGeneration"] == obj["metadata"]["generation"]
        request = next(r.json() for r in hook.requests if r.json()["phase"] == "pre-reconcile")
        assert request["object"]["metadata"]["name"] == "gh"
        assert request["children"]["webhookPath"].startswith("/hook/")
        assert "e2e-hook-token" not in json.dumps(request)

        state["registered"] = True  # the controller asks again with backoff

        async def is_ready() -> Any:
            return (ready_of(await get(installed, namespace, "gh")) or ("",))[0] == "True"

        await eventually(is_ready, "Ready=True once the hook reports True")

        await kubectl(installed, "delete", "receiver", "gh", "-n", namespace, "--wait=false")

        async def finalize_asked_twice() -> bool:
            return sum(1 for r in hook.requests if r.json()["phase"] == "finalize") >= 2

        await eventually(finalize_asked_twice, "two finalize calls")
        held = await get(installed, namespace, "gh")
        assert held is not None, "deleted although the finalize hook did not answer 2xx"
        assert held["metadata"].get("deletionTimestamp")
        assert HOOKS_FINALIZER in held["metadata"]["finalizers"]

        state["unregistered"] = True

        async def gone() -> bool:
            return await get(installed, namespace, "gh") is None

        await eventually(gone, "deletion once the finalize hook answered 2xx")

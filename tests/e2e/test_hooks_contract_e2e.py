"""Hooks API v1 error and answer contract on the real kube-apiserver (issue 16, "Hooks"; docs/hooks.md).

The controller runs in-process in Kubernetes mode with the ServiceAccount kubeconfig of ``config/rbac``
(``test_hooks_e2e.controller``), against the generated CRDs; a real hook server on 127.0.0.1 answers.

* A ``pre-reconcile`` hook answering a ``True`` condition without ``message`` (what Scoby's examples send):
  the CRD requires ``status.conditions[].message``; the controller must write a default message, so the
  status lands on the API server, the Receiver is Ready and no reconcile error is counted for it.
* A ``finalize`` hook answering ``permanent: true``: not retried ("retrying will not help"); the status
  (Stalled=True ``HookFailed``) and a Warning Event tell the user to remove the hook or fix and annotate
  with ``reconcile.fluxcd.io/requestedAt``; annotating asks the hook again and the deletion completes.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from notification_controller.api import RECONCILE_REQUEST_ANNOTATION
from notification_controller.api.hooks import HOOKS_FINALIZER
from tests.e2e.apiserver import KubeTestServer
from tests.e2e.test_hooks_e2e import controller, eventually, get, kubectl
from tests.support.capture import CapturedRequest, CaptureServer, Reply

pytestmark = pytest.mark.e2e


def receiver_manifest(namespace: str, url: str, *capabilities: str) -> str:
    return textwrap.dedent(
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
            - name: scoby
              address: {{uri: '{url}/hook'}}
              timeout: PT5S
              capabilities: [{", ".join(capabilities)}]
        """
    )


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


async def warning_events(kube: KubeTestServer, namespace: str, reason: str) -> list[str]:
    out = await kubectl(kube, "get", "events", "-n", namespace, "-o", "json")
    items = json.loads(out)["items"] if out else []
    return [
        e["message"]
        for e in items
        if e.get("type") == "Warning" and e.get("reason") == reason and e["involvedObject"]["name"] == "gh"
    ]


async def test_true_condition_without_message_is_written_with_a_default_message(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str
) -> None:
    def answer(request: CapturedRequest) -> Reply:
        # Scoby's hook examples: {"type": ..., "status": "True"}, no reason, no message
        return Reply(body={"object": {"status": {"conditions": [{"type": "Webhook", "status": "True"}]}}})

    async with CaptureServer() as hook, controller(sa_kubeconfig, namespace) as app:
        hook.on("POST", "/hook", answer)
        await kubectl(
            installed,
            "apply",
            "--validate=false",
            "-f",
            "-",
            stdin=receiver_manifest(namespace, hook.url, "pre-reconcile"),
        )

        async def stored() -> Any:
            obj = await get(installed, namespace, "gh")
            found = conditions(obj)
            return "Webhook" in found and found.get("Ready", {}).get("status") == "True" and found

        found = await eventually(stored, "the hook's condition stored and Ready=True")
        assert found["Webhook"]["message"] == "hook 'scoby' reported Webhook=True"
        assert found["Webhook"]["reason"] == "ReportedByHook"
        labels = {"kind": "Receiver", "name": "gh", "namespace": namespace}
        assert not app.registry.get_sample_value("notification_reconcile_errors_total", labels)


async def test_permanent_finalize_error_is_not_retried_and_says_what_to_do(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str
) -> None:
    state = {"fixed": False}

    def answer(request: CapturedRequest) -> Reply:
        if request.json()["phase"] != "finalize" or state["fixed"]:
            return Reply(body={})
        return Reply(400, {"message": "webhook owned by another team", "permanent": True})

    def finalize_calls() -> int:
        return sum(1 for r in hook.requests if r.json()["phase"] == "finalize")

    async with CaptureServer() as hook, controller(sa_kubeconfig, namespace) as app:
        hook.on("POST", "/hook", answer)
        await kubectl(
            installed,
            "apply",
            "--validate=false",
            "-f",
            "-",
            stdin=receiver_manifest(namespace, hook.url, "finalize"),
        )

        async def ready() -> bool:
            obj = await get(installed, namespace, "gh") or {"metadata": {}}
            finalizers = obj["metadata"].get("finalizers", [])
            return HOOKS_FINALIZER in finalizers and conditions(obj).get("Ready", {}).get("status") == "True"

        await eventually(ready, "Ready=True with the hooks' finalizer")
        await asyncio.sleep(1)  # the requeue after adding the finalizer (0.2 s) has fired: converged
        await kubectl(installed, "delete", "receiver", "gh", "-n", namespace, "--wait=false")

        async def stalled() -> Any:
            found = conditions(await get(installed, namespace, "gh"))
            return found.get("Stalled", {}).get("reason") == "HookFailed" and found

        found = await eventually(stalled, "Stalled=True HookFailed")
        message = found["Stalled"]["message"]
        assert "webhook owned by another team" in message
        assert "remove hook 'scoby' from spec.hooks" in message
        assert RECONCILE_REQUEST_ANNOTATION in message
        assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "HookFailed")
        events = await eventually(
            lambda: warning_events(installed, namespace, "HookFailed"), "a HookFailed Warning"
        )
        assert RECONCILE_REQUEST_ANNOTATION in events[0]

        await asyncio.sleep(3)  # min_retry_delay 0.2 s: a retried error would have been asked ~4 times
        assert finalize_calls() == 1
        assert app.controllers.queues["Receiver"].failures((namespace, "gh")) == 0  # no backoff pending
        held = await get(installed, namespace, "gh")
        assert held is not None and HOOKS_FINALIZER in held["metadata"]["finalizers"]

        state["fixed"] = True  # the user fixed the cause, then does what the message says
        await kubectl(
            installed, "annotate", "receiver", "gh", "-n", namespace, f"{RECONCILE_REQUEST_ANNOTATION}=fixed"
        )

        async def gone() -> bool:
            return await get(installed, namespace, "gh") is None

        await eventually(gone, "deletion once the annotated retry answered 2xx")
        assert finalize_calls() == 2
        labels = {"kind": "Receiver", "name": "gh", "namespace": namespace}
        assert app.registry.get_sample_value("notification_reconcile_errors_total", labels) is None

"""Run the controller as a subprocess against the test API server, as a cluster admin would deploy it.

``install`` renders ``config/default`` with kubectl's kustomize and installs it: CRDs with
``kubectl create --validate=false`` (the 1.20 server rejects ``x-kubernetes-validations`` on apply, and
silently drops them on create: the controller enforces those rules itself), everything else with apply.
``Controller`` starts ``python -m notification_controller`` with the ServiceAccount kubeconfig of
``config/rbac`` (not admin), so every e2e test also proves the RBAC is sufficient.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from notification_controller.objects.yamldoc import BaseLoader as KubeYAML  # kustomize writes `=` plain
from tests.e2e.apiserver import KubeTestServer
from tests.support.capture import CapturedRequest
from tests.support.ports import listener_ports

ROOT = Path(__file__).resolve().parents[2]
NS = "flux-system"


def wait_for(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.25, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last={last!r}")


def render_config() -> list[dict[str, Any]]:
    out = subprocess.run(
        ["/usr/bin/kubectl", "kustomize", str(ROOT / "config" / "default")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.load_all(out, Loader=KubeYAML) if d]


def install(kube: KubeTestServer) -> None:
    """Install config/default (idempotent within one API server)."""
    kube.kubectl("create", "namespace", NS)
    docs = render_config()
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    rest = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    for crd in crds:
        kube.kubectl("create", "--validate=false", "-f", "-", input=yaml.safe_dump(crd))
    for crd in crds:
        kube.kubectl(
            "wait",
            "--for=condition=Established",
            f"crd/{crd['metadata']['name']}",
            "--timeout=60s",
            check=True,
        )
    kube.kubectl("apply", "--validate=false", "-f", "-", input=yaml.safe_dump_all(rest), check=True)
    # Flux kinds the receivers annotate and the alerts match labels of: minimal CRDs of our own.
    for group, kind, plural in (
        ("source.toolkit.fluxcd.io", "GitRepository", "gitrepositories"),
        ("kustomize.toolkit.fluxcd.io", "Kustomization", "kustomizations"),
    ):
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {
                "group": group,
                "names": {
                    "kind": kind,
                    "plural": plural,
                    "singular": kind.lower(),
                    "listKind": kind + "List",
                },
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "subresources": {"status": {}},
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
        kube.kubectl("apply", "-f", "-", input=json.dumps(crd), check=True)
        kube.kubectl(
            "wait", "--for=condition=Established", f"crd/{plural}.{group}", "--timeout=60s", check=True
        )


def apply(kube: KubeTestServer, manifest: str, namespace: str | None = None) -> None:
    args = ["apply", "--validate=false", "-f", "-"]
    if namespace:
        args[1:1] = ["-n", namespace]
    kube.kubectl(*args, input=manifest, check=True)


def get(kube: KubeTestServer, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    result = kube.kubectl("get", kind, name, "-n", namespace, "-o", "json")
    if result.returncode != 0:
        return None
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def condition(obj: dict[str, Any] | None, type_: str) -> tuple[str, str, str] | None:
    """(status, reason, message) of the ``type_`` condition, whatever generation it observed."""
    for cond in (obj or {}).get("status", {}).get("conditions", []):
        if cond["type"] == type_:
            return cond["status"], cond["reason"], cond.get("message", "")
    return None


def ready(obj: dict[str, Any] | None) -> tuple[str, str, str] | None:
    """(status, reason, message) of the Ready condition, once observed for the current generation."""
    if not obj:
        return None
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("observedGeneration") == obj["metadata"].get(
            "generation"
        ):
            return cond["status"], cond["reason"], cond.get("message", "")
    return None


class Controller:
    """The controller as a subprocess. ``ports`` maps events/receiver/metrics/health to local ports."""

    def __init__(self, kube: KubeTestServer, kubeconfig: Path, *extra: str, name: str = "c") -> None:
        self.ports = listener_ports()
        self.log_path = Path(kube.workdir) / f"controller-{name}-{self.ports['events']}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "notification_controller",
                f"--kubeconfig={kubeconfig}",
                f"--events-addr=127.0.0.1:{self.ports['events']}",
                f"--receiverAddr=127.0.0.1:{self.ports['receiver']}",
                f"--metrics-addr=127.0.0.1:{self.ports['metrics']}",
                f"--health-addr=127.0.0.1:{self.ports['health']}",
                "--log-encoding=console",
                "--log-level=debug",
                "--resync-interval=30s",
                "--min-retry-delay=200ms",
                "--max-retry-delay=5s",
                *extra,
            ],
            cwd=ROOT,
            env={**os.environ, "RUNTIME_NAMESPACE": NS, "PYTHONPATH": str(ROOT)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def url(self, server: str, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[server]}{path}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        """``wait_for``; a timeout also shows the end of this controller's log (what it was doing)."""
        try:
            return wait_for(check, timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\ncontroller log, last lines:\n{self.log()[-6000:]}") from None

    def wait_ready(self, timeout: float = 60) -> None:
        import urllib.error
        import urllib.request

        def check() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"controller exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url("health", "/readyz"), timeout=2) as resp:
                    return bool(resp.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        wait_for(check, timeout, what="controller /readyz")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return int(self.proc.returncode)


def post_event(controller: Controller, event: dict[str, Any]) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        controller.url("events"),
        data=json.dumps(event).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def flux_event(namespace: str, name: str, message: str, kind: str = "Kustomization") -> dict[str, Any]:
    return {
        "involvedObject": {
            "kind": kind,
            "namespace": namespace,
            "name": name,
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        },
        "severity": "info",
        "timestamp": "2026-11-22T10:00:00Z",
        "message": message,
        "reason": "ReconciliationSucceeded",
        "metadata": {"kustomize.toolkit.fluxcd.io/revision": f"main@sha1:{time.time_ns():040d}"[:51]},
        "reportingController": "kustomize-controller",
    }


class ThreadedSink:
    """A CaptureServer on its own event loop thread, for synchronous e2e tests."""

    def __init__(self) -> None:
        import asyncio
        import threading

        from tests.support.capture import CaptureServer

        self._loop = asyncio.new_event_loop()
        self._server = CaptureServer()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        asyncio.run_coroutine_threadsafe(self._server.__aenter__(), self._loop).result(10)

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self._loop)
        self._ready.set()
        self._loop.run_forever()

    @property
    def url(self) -> str:
        return self._server.url

    def requests(self) -> list[CapturedRequest]:
        return list(self._server.requests)

    def messages(self) -> list[str]:
        return [r.json().get("message", "") for r in list(self._server.requests)]

    def close(self) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self._server.__aexit__(None, None, None), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

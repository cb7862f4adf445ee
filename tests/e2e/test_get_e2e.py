"""``notification-controller get --kubeconfig`` against a real kube-apiserver (issue 25 item 7): ``flux get``'s
columns from the status the controller wrote, and the same rows as the running controller's ``/status``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import Controller, apply, get, ready, wait_for

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).parent / "notification-controller"


def _get(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "get", *argv], capture_output=True, text=True, timeout=60, check=False
    )


def test_get_reads_the_cluster_and_agrees_with_the_controller(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str
) -> None:
    controller = Controller(installed, sa_kubeconfig, name="get")
    try:
        controller.wait_ready()
        apply(
            installed,
            textwrap.dedent(
                f"""\
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {namespace}}}
                spec: {{type: generic, address: "http://127.0.0.1:9/hook"}}
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Alert
                metadata: {{name: on-call, namespace: {namespace}}}
                spec:
                  providerRef: {{name: sink}}
                  eventSources: [{{kind: Kustomization, name: '*'}}]
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Alert
                metadata: {{name: paused, namespace: {namespace}}}
                spec:
                  suspend: true
                  providerRef: {{name: sink}}
                  eventSources: [{{kind: Kustomization, name: '*'}}]
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1
                kind: Receiver
                metadata: {{name: github, namespace: {namespace}}}
                spec:
                  type: github
                  resources: [{{kind: GitRepository, name: podinfo}}]
                  secretRef: {{name: missing-token}}
                """
            ),
        )
        for kind, name in (("alerts", "on-call"), ("providers", "sink"), ("receivers", "github")):

            def reconciled(kind: str = kind, name: str = name) -> tuple[str, str, str] | None:
                return ready(get(installed, kind, namespace, name))

            wait_for(reconciled, what=f"{kind}/{name} Ready")

        done = _get("alerts", "-n", namespace, "--kubeconfig", str(installed.kubeconfig))
        assert done.returncode == 0, done.stderr
        header, *rows = done.stdout.splitlines()
        assert header.split() == ["NAME", "READY", "MESSAGE", "SUSPENDED"]
        assert [(r.split()[0], r.split()[-1]) for r in rows] == [("on-call", "False"), ("paused", "True")]
        assert rows[0].split()[1] == "True"  # on-call: READY, as the controller wrote it

        def both(kind: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            cluster = _get(kind, "-n", namespace, "--kubeconfig", str(installed.kubeconfig), "-o", "json")
            local = _get(
                kind, "-n", namespace, "--addr", f"127.0.0.1:{controller.ports['health']}", "-o", "json"
            )
            assert cluster.returncode == 0 and local.returncode == 0, (cluster.stderr, local.stderr)
            keep = ("namespace", "name", "ready", "reason", "message", "suspended")
            return (
                [{k: r[k] for k in keep} for r in json.loads(cluster.stdout)],
                [{k: r[k] for k in keep} for r in json.loads(local.stdout)],
            )

        for kind in ("alerts", "providers"):
            cluster, local = both(kind)
            assert cluster == local and cluster, kind  # the two modes print the same rows
        cluster, local = both("receivers")
        [receiver] = cluster
        assert (receiver["name"], receiver["ready"]) == ("github", "False")
        assert "missing-token" in receiver["message"]
        assert [r["ready"] for r in local] == ["False"]

        denied = _get("alerts", "-A", "--kubeconfig", str(Path(installed.workdir) / "nope.kubeconfig"))
        assert (
            denied.returncode == 1
            and denied.stderr.startswith("error: ")
            and "Traceback" not in denied.stderr
        )
    finally:
        controller.stop()

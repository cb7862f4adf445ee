"""Inhibition on a real kube-apiserver (issue 26 item 5, "Done when"): the graph comes from Kustomizations
watched through the controller's own least-privilege RBAC (the ServiceAccount kubeconfig of config/rbac),
only while an Alert has ``spec.inhibitDependents``; Flux's HelmRelease CRD is absent (logged at info,
nothing else breaks). A failing GitRepository followed by five failing dependents delivers one
notification, and its recovery one more naming the five.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import ROOT, Controller, ThreadedSink, apply, post_event, wait_for

pytestmark = pytest.mark.e2e

DEPENDENTS = ["infra", "apps", "tenant", "monitoring", "dashboards"]


def kustomizations(namespace: str) -> str:
    def ks(name: str, source: str, *depends: str) -> dict[str, Any]:
        return {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "sourceRef": {
                    "kind": "GitRepository" if source == "repo" else "OCIRepository",
                    "name": source,
                },
                "dependsOn": [{"name": d} for d in depends],
                "path": f"./{name}",
                "interval": "10m",
                "prune": True,
            },
        }

    docs = [
        ks("infra", "repo"),
        ks("apps", "repo", "infra"),
        ks("tenant", "repo"),
        ks("monitoring", "charts", "apps"),  # another source, but dependsOn chains back to repo
        ks("dashboards", "charts", "monitoring"),
        ks("unrelated", "other"),
    ]
    return yaml.safe_dump_all(docs)


def alert(namespace: str) -> str:
    return json.dumps(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": "flux", "namespace": namespace},
            "spec": {
                "providerRef": {"name": "sink"},
                "eventSources": [
                    {"kind": "GitRepository", "name": "*"},
                    {"kind": "Kustomization", "name": "*"},
                ],
                "inhibitDependents": True,
            },
        }
    )


def event(namespace: str, kind: str, name: str, severity: str, message: str) -> dict[str, Any]:
    group = "source.toolkit.fluxcd.io" if kind == "GitRepository" else "kustomize.toolkit.fluxcd.io"
    return {
        "involvedObject": {"kind": kind, "namespace": namespace, "name": name, "apiVersion": f"{group}/v1"},
        "severity": severity,
        "timestamp": "2026-11-27T10:00:00Z",
        "message": message,
        "reason": "Failed" if severity == "error" else "Succeeded",
        "reportingController": "kustomize-controller",
    }


def graph_objects(controller: Controller) -> float:
    with urllib.request.urlopen(controller.url("metrics", "/metrics"), timeout=5) as resp:
        text = resp.read().decode()
    found = re.search(r"^notification_inhibit_graph_objects (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else -1.0


def explain(installed: KubeTestServer, namespace: str, name: str, state: Path) -> dict[str, Any]:
    """``explain --kubeconfig --store``: the verdict of this test's Alert for a dependent's error."""
    event_file = Path(installed.workdir) / f"inhibit-{namespace}.json"
    event_file.write_text(json.dumps(event(namespace, "Kustomization", name, "error", "x")), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "notification_controller", "explain", "--event", str(event_file),
         "--kubeconfig", str(installed.kubeconfig), "--store", f"sqlite:{state}", "-o", "json"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr
    verdicts = {v["alert"]: v for v in json.loads(run.stdout)["alerts"]}
    verdict: dict[str, Any] = verdicts[f"{namespace}/flux"]
    return verdict


def test_one_failure_five_dependents_through_our_rbac(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    sink = ThreadedSink()
    apply(installed, kustomizations(namespace))
    state = tmp_path / "state.db"
    controller = Controller(installed, sa_kubeconfig, f"--store=sqlite:{state}", name="inhibit")
    try:
        controller.wait_ready()
        apply(
            installed,
            textwrap.dedent(
                f"""\
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {namespace}}}
                spec: {{type: generic, address: "{sink.url}/inhibit"}}
                """
            ),
        )
        time.sleep(1)
        assert graph_objects(controller) == 0  # no Alert wants the graph: nothing listed
        apply(installed, alert(namespace))
        # the watch starts with the Alert; the six Kustomizations (and any other test's) are edges now
        wait_for(lambda: graph_objects(controller) >= 6, timeout=60, what="the graph of Kustomizations")
        wait_for(
            lambda: "HelmRelease: helm.toolkit.fluxcd.io/v2 is not served" in controller.log(),
            what="the absent HelmRelease CRD logged",
        )

        def post(*events: dict[str, Any]) -> None:
            for body in events:
                assert post_event(controller, body) == 202

        post(
            event(namespace, "GitRepository", "repo", "error", "failed to checkout: DNS lookup failed"),
            *(
                event(namespace, "Kustomization", name, "error", "dependency not ready")
                for name in DEPENDENTS
            ),
        )
        wait_for(lambda: len(sink.messages()) >= 1, what="the source's failure")
        time.sleep(3)  # the five would have arrived by now
        assert sink.messages() == ["failed to checkout: DNS lookup failed"], sink.messages()

        # explain reads the cluster's graph and the controller's store: it names the failing source
        verdict = explain(installed, namespace, "dashboards", state)
        assert verdict["stage"] == "quiet-inhibit", verdict
        assert verdict["reason"].startswith(
            f"inhibited by GitRepository/{namespace}/repo (failing since 20"
        ), verdict

        # a Kustomization added now is in the graph at once (the watch), and held too
        late = {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "late", "namespace": namespace},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "repo"}, "path": ".", "interval": "1m"},
        }
        apply(installed, json.dumps(late))
        wait_for(lambda: graph_objects(controller) >= 7, what="the late Kustomization")
        post(event(namespace, "Kustomization", "late", "error", "source not ready"))

        post(event(namespace, "GitRepository", "repo", "info", "stored artifact for revision main@sha1:1"))
        wait_for(lambda: len(sink.messages()) >= 2, what="the recovery")
        time.sleep(3)  # no separate release: the Alert took the recovery
        requests = sink.requests()
        assert len(requests) == 2, sink.messages()
        held = requests[1].json()["metadata"]["heldWhileFailing"]
        expected = [f"Kustomization/{namespace}/{name}" for name in [*DEPENDENTS, "late"]]
        assert held.split(", ") == expected, held

        # no Alert wants it any more: the watch stops and the graph is forgotten
        installed.kubectl("delete", "alert", "flux", "-n", namespace, check=True)
        wait_for(lambda: graph_objects(controller) == 0, what="the graph forgotten")
    finally:
        code = controller.stop()
        sink.close()
    assert code == 0, controller.log()[-3000:]
    # the graph's reads were allowed (other tests' namespaces being deleted may refuse Events: not ours)
    refused = [
        line
        for line in controller.log().lower().splitlines()
        if "forbidden" in line and ("kustomizations" in line or "helmreleases" in line)
    ]
    assert refused == [], f"the RBAC of config/rbac was not enough: {refused[:3]}"

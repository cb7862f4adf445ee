"""Inhibition through a real controller process in local mode (issue 26 item 5, "Done when"): the graph is
the manifests' own Kustomizations (``sourceRef`` and ``dependsOn`` chains), the sink a real HTTP server.

A failing GitRepository followed by five failing dependents delivers ONE notification; the source's
recovery delivers one more, naming the five. An Alert that does not take the recovery (``eventSeverity:
error``) gets a release notification of its own. Explicit ``inhibitRules`` hold a target while a source
matching the rule fails, with the ``equal`` fields compared. With ``--store=sqlite:`` the failure outlives a
SIGKILL of the controller; with ``nats://`` two replicas share it. ``explain --store`` names the failing source.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.capture import CaptureServer
from tests.support.controllers import ROOT, ControllerProcess, post_event
from tests.support.nats_server import run_nats_server

PROVIDER = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: flux-system}}
spec: {{type: generic, address: "{sink}"}}
"""

GRAPH = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: flux-system}
spec: {url: "https://example.com/repo.git", interval: 1m}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: infra, namespace: flux-system}
spec: {sourceRef: {kind: GitRepository, name: repo}, path: ./infra, interval: 10m, prune: true}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  dependsOn: [{name: infra}]
  path: ./apps
  interval: 10m
  prune: true
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: tenant-a, namespace: tenants}
spec:
  sourceRef: {kind: GitRepository, name: repo, namespace: flux-system}
  path: ./tenants/a
  interval: 10m
  prune: true
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: monitoring, namespace: flux-system}
spec:
  sourceRef: {kind: OCIRepository, name: charts}
  dependsOn: [{name: apps}]
  path: ./monitoring
  interval: 10m
  prune: true
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: dashboards, namespace: flux-system}
spec:
  sourceRef: {kind: OCIRepository, name: charts}
  dependsOn: [{name: monitoring}]
  path: ./dashboards
  interval: 10m
  prune: true
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: unrelated, namespace: flux-system}
spec: {sourceRef: {kind: GitRepository, name: other}, path: ., interval: 10m, prune: true}
"""
"""``infra`` and ``apps`` (sourceRef), ``tenant-a`` (sourceRef across namespaces), ``monitoring`` and
``dashboards`` (another source, but ``dependsOn`` chains back to ``apps``): five dependents of ``repo``."""

DEPENDENTS = [
    ("flux-system", "infra"),
    ("flux-system", "apps"),
    ("tenants", "tenant-a"),
    ("flux-system", "monitoring"),
    ("flux-system", "dashboards"),
]

ALERT = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: flux-system}}
spec:
  providerRef: {{name: sink}}
  eventSeverity: {severity}
  eventSources:
  - {{kind: GitRepository, name: "*"}}
  - {{kind: Kustomization, name: "*"}}
  - {{kind: Kustomization, name: "*", namespace: tenants}}
  inhibitDependents: true
"""


def event(kind: str, namespace: str, name: str, severity: str, message: str) -> dict[str, Any]:
    group = "source.toolkit.fluxcd.io" if kind == "GitRepository" else "kustomize.toolkit.fluxcd.io"
    return {
        "involvedObject": {"kind": kind, "namespace": namespace, "name": name, "apiVersion": f"{group}/v1"},
        "severity": severity,
        "timestamp": "2026-11-27T10:00:00Z",
        "message": message,
        "reason": "GitOperationFailed" if severity == "error" else "NewArtifact",
        "reportingController": "source-controller" if kind == "GitRepository" else "kustomize-controller",
    }


def write_manifests(directory: Path, sink: str, *alerts: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "flux.yaml").write_text(GRAPH, encoding="utf-8")
    (directory / "alerts.yaml").write_text("---\n".join([PROVIDER.format(sink=sink), *alerts]), "utf-8")
    return directory


async def settle(sink: CaptureServer, count: int, quiet: float = 3.0) -> list[dict[str, Any]]:
    """Wait for ``count`` requests, then ``quiet`` seconds more (longer than the release delay, 2 s) in
    which nothing else may arrive."""
    await sink.wait_for(count, timeout=30)
    await asyncio.sleep(quiet)
    return [json.loads(r.body) for r in sink.requests]


async def post_all(controller: ControllerProcess, *events: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session:
        for body in events:
            assert await post_event(session, controller.events_url, body) == 202


async def test_one_failure_five_dependents_two_notifications(tmp_path: Path) -> None:
    async with CaptureServer() as sink:
        manifests = write_manifests(
            tmp_path / "m", sink.url + "/hook", ALERT.format(name="flux", severity="info")
        )
        controller = ControllerProcess(manifests, log_path=tmp_path / "controller.log")
        await controller.start()
        try:
            await post_all(
                controller,
                event(
                    "GitRepository", "flux-system", "repo", "error", "failed to checkout: DNS lookup failed"
                ),
                *(
                    event(
                        "Kustomization",
                        ns,
                        name,
                        "error",
                        "source 'GitRepository/flux-system/repo' not ready",
                    )
                    for ns, name in DEPENDENTS
                ),
            )
            got = await settle(sink, 1)
            assert [b["involvedObject"]["name"] for b in got] == ["repo"], got
            assert await controller.metric("notification_suppressed_total", reason="inhibited") == 5

            # an object outside repo's graph is not held
            await post_all(controller, event("Kustomization", "flux-system", "unrelated", "error", "broken"))
            got = await settle(sink, 2, quiet=0.5)
            assert got[1]["involvedObject"]["name"] == "unrelated"

            await post_all(
                controller, event("GitRepository", "flux-system", "repo", "info", "stored artifact")
            )
            got = await settle(sink, 3)
            assert len(got) == 3, got
            recovery = got[2]
            assert recovery["involvedObject"]["name"] == "repo" and recovery["severity"] == "info"
            held = recovery["metadata"]["heldWhileFailing"]
            assert held == ", ".join(f"Kustomization/{ns}/{name}" for ns, name in DEPENDENTS), held

            # repo recovered: infra's errors go out again (apps' would not: infra, its dependency, fails)
            await post_all(
                controller, event("Kustomization", "flux-system", "infra", "error", "apply failed")
            )
            got = await settle(sink, 4, quiet=0.5)
            assert got[3]["involvedObject"]["name"] == "infra"
        finally:
            assert await controller.stop() == 0, controller.log()[-3000:]


async def test_an_alert_without_the_recovery_gets_a_release(tmp_path: Path) -> None:
    """``eventSeverity: error``: the recovery is not this Alert's; a release notification names the held."""
    async with CaptureServer() as sink:
        manifests = write_manifests(
            tmp_path / "m", sink.url + "/hook", ALERT.format(name="errors", severity="error")
        )
        controller = ControllerProcess(manifests, log_path=tmp_path / "controller.log")
        await controller.start()
        try:
            await post_all(
                controller,
                event("GitRepository", "flux-system", "repo", "error", "failed to checkout"),
                event("Kustomization", "flux-system", "infra", "error", "source not ready"),
                event("Kustomization", "flux-system", "dashboards", "error", "dependency not ready"),
                event("GitRepository", "flux-system", "repo", "info", "stored artifact"),
            )
            got = await settle(sink, 2)
            assert len(got) == 2, got
            release = got[1]
            assert release["involvedObject"]["name"] == "repo"
            assert release["message"] == (
                "GitRepository/flux-system/repo recovered; held while it failed: "
                "Kustomization/flux-system/infra, Kustomization/flux-system/dashboards"
            )
        finally:
            assert await controller.stop() == 0, controller.log()[-3000:]


RULES_ALERT = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: rules, namespace: flux-system}
spec:
  providerRef: {name: sink}
  eventSources: [{kind: HelmRelease, name: "*"}, {kind: HelmRelease, name: "*", namespace: team-b}]
  inhibitRules:
  - sourceMatchers: [{name: name, value: database}]
    targetMatchers: [{name: name, value: "api-.*", matchType: "=~"}]
    equal: [namespace]
"""


def helm(namespace: str, name: str, severity: str, message: str = "") -> dict[str, Any]:
    body = event("Kustomization", namespace, name, severity, message or f"{name}: {severity}")
    body["involvedObject"] = {
        "kind": "HelmRelease",
        "namespace": namespace,
        "name": name,
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
    }
    body["reportingController"] = "helm-controller"
    return body


async def test_explicit_inhibit_rules_with_equal_fields(tmp_path: Path) -> None:
    async with CaptureServer() as sink:
        manifests = write_manifests(tmp_path / "m", sink.url + "/hook", RULES_ALERT)
        controller = ControllerProcess(manifests, log_path=tmp_path / "controller.log")
        await controller.start()
        try:
            await post_all(
                controller,
                helm("flux-system", "database", "error"),  # the source: sent
                helm("flux-system", "api-users", "error"),  # target, same namespace: held
                helm("team-b", "api-orders", "error"),  # target, another namespace (equal): sent
                helm("flux-system", "frontend", "error"),  # not a target: sent
            )
            got = await settle(sink, 3)
            names = sorted(b["involvedObject"]["name"] for b in got)  # each event: its own task, any order
            assert names == ["api-orders", "database", "frontend"], got
            await post_all(controller, helm("flux-system", "database", "info"))
            got = await settle(sink, 4)
            assert got[3]["involvedObject"]["name"] == "database"
            assert got[3]["metadata"]["heldWhileFailing"] == "HelmRelease/flux-system/api-users"
            again = helm("flux-system", "api-users", "error", "upgrade retries exhausted")
            await post_all(controller, again)  # database recovered: sent
            got = await settle(sink, 5, quiet=0.5)
            assert got[4]["involvedObject"]["name"] == "api-users"
        finally:
            assert await controller.stop() == 0, controller.log()[-3000:]


async def test_the_failure_outlives_a_restart_on_sqlite(tmp_path: Path) -> None:
    async with CaptureServer() as sink:
        manifests = write_manifests(
            tmp_path / "m", sink.url + "/hook", ALERT.format(name="flux", severity="info")
        )
        args = [f"--store=sqlite:{tmp_path / 'state.db'}"]
        controller = ControllerProcess(manifests, args, log_path=tmp_path / "controller.log")
        await controller.start()
        await post_all(
            controller, event("GitRepository", "flux-system", "repo", "error", "failed to checkout")
        )
        await sink.wait_for(1, timeout=30)
        await controller.kill()
        controller = ControllerProcess(manifests, args, log_path=tmp_path / "controller-2.log")
        await controller.start()
        try:
            await post_all(
                controller,
                *(event("Kustomization", ns, name, "error", "source not ready") for ns, name in DEPENDENTS),
                event("GitRepository", "flux-system", "repo", "info", "stored artifact"),
            )
            got = await settle(sink, 2)
            assert len(got) == 2, got
            assert got[1]["metadata"]["heldWhileFailing"].count("Kustomization/") == 5
        finally:
            assert await controller.stop() == 0, controller.log()[-3000:]


async def cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "notification_controller",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_explain_names_the_failing_source_from_the_controllers_store(tmp_path: Path) -> None:
    """``explain --store``: the controller's record of the failure (read, never written) and the manifests'
    graph; without ``--store`` nothing is known to fail."""
    async with CaptureServer() as sink:
        manifests = write_manifests(
            tmp_path / "m", sink.url + "/hook", ALERT.format(name="flux", severity="info")
        )
        db = tmp_path / "state.db"
        controller = ControllerProcess(manifests, [f"--store=sqlite:{db}"], log_path=tmp_path / "c.log")
        await controller.start()
        try:
            await post_all(
                controller, event("GitRepository", "flux-system", "repo", "error", "checkout failed")
            )
            await sink.wait_for(1, timeout=30)
            path = tmp_path / "event.json"
            path.write_text(json.dumps(event("Kustomization", "tenants", "tenant-a", "error", "not ready")))
            common = ("explain", "--event", str(path), "--manifests", str(manifests))
            code, out, err = await cli(*common, "--store", f"sqlite:{db}")
            assert code == 1, (out, err)
            line = out.splitlines()[-1]
            assert (
                "would not send: quiet-inhibit: inhibited by GitRepository/flux-system/repo (failing since 20"
                in (line)
            ), out
            code, out, err = await cli(*common)
            assert code == 0 and "would send" in out, (out, err)
            code, out, err = await cli(*common, "--store", f"sqlite:{tmp_path / 'typo.db'}")
            assert code == 2 and "no such database file" in err, (out, err)
            # explain wrote nothing: the controller still holds the dependent, and names it at the recovery
            await post_all(
                controller,
                event("Kustomization", "tenants", "tenant-a", "error", "not ready"),
                event("GitRepository", "flux-system", "repo", "info", "stored artifact"),
            )
            got = await settle(sink, 2)
            assert got[1]["metadata"]["heldWhileFailing"] == "Kustomization/tenants/tenant-a"
        finally:
            assert await controller.stop() == 0, controller.log()[-3000:]


async def test_two_replicas_on_nats_share_the_failure(tmp_path: Path) -> None:
    """The source's failure reaches replica A, the dependents replica B (held: B reads A's record), the
    recovery A again, which names what B held."""
    async with (
        run_nats_server(jetstream=True, store_dir=str(tmp_path / "js")) as nats,
        CaptureServer() as sink,
    ):
        manifests = write_manifests(
            tmp_path / "m", sink.url + "/hook", ALERT.format(name="flux", severity="info")
        )
        replicas = [
            ControllerProcess(manifests, [f"--store={nats.url}"], log_path=tmp_path / f"replica-{i}.log")
            for i in range(2)
        ]
        await asyncio.gather(*(r.start() for r in replicas))
        a, b = replicas
        try:
            await post_all(a, event("GitRepository", "flux-system", "repo", "error", "checkout failed"))
            await sink.wait_for(1, timeout=30)
            await post_all(
                b, *(event("Kustomization", ns, name, "error", "source not ready") for ns, name in DEPENDENTS)
            )
            await post_all(a, event("GitRepository", "flux-system", "repo", "info", "stored artifact"))
            got = await settle(sink, 2)
            assert len(got) == 2, got
            held = got[1]["metadata"]["heldWhileFailing"]
            assert held == ", ".join(f"Kustomization/{ns}/{name}" for ns, name in DEPENDENTS), held
        finally:
            codes = [await r.stop() for r in replicas]
            assert codes == [0, 0], a.log()[-2000:] + b.log()[-2000:]

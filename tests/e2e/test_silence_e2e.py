"""Silences on a real kube-apiserver (issue 26 items 1 and 7), with the controller running under the
least-privilege RBAC of config/rbac (``sa_kubeconfig``):

* the Silence CRD of config/crd is served: ``kubectl get silences`` prints State/Ends/Held/Age, the
  ``notification-controller`` category lists Silences, and the API server itself refuses a Silence over the
  schema's bounds (33 matchers, an unknown matcher name);
* a Silence created through the API server goes Pending → Active → Expired on time (short windows), with
  ``Active`` and ``Expired`` Events; a matching notification while it is Active is held and
  ``status.held`` says 1; once expired for ``--silence-retention`` the object is deleted;
* an invalid Silence is Ready=False ValidationFailed naming the field; ``allNamespaces`` outside
  ``--cluster-silences-namespace`` is Ready=False AllNamespacesNotAllowed;
* on an API server WITHOUT the Silence CRD, the controller starts, is ready and delivers events; the informer
  logs once and, when the CRD appears, lists and watches Silences (kube layer, in-process, short interval).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from notification_controller.api.silence import SILENCE_API_VERSION
from notification_controller.errors import KubeError
from notification_controller.kube.client import KubeClient
from notification_controller.kube.cluster import KubeCluster
from notification_controller.kube.informer import SILENCES, Backoff, Informer
from notification_controller.objects.base import ObjectRef, ObjectStore
from tests.e2e.apiserver import KubeTestServer, ensure_apiserver_binary
from tests.e2e.controllerkit import (
    NS,
    ROOT,
    Controller,
    ThreadedSink,
    apply,
    condition,
    flux_event,
    get,
    post_event,
    render_config,
    wait_for,
)

pytestmark = pytest.mark.e2e

SILENCE = "silences.notification-controller.io"
SCRIPT = Path(sys.executable).parent / "notification-controller"


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def silence_manifest(namespace: str, name: str, **spec: Any) -> str:
    spec.setdefault("matchers", [{"name": "kind", "value": "Kustomization"}])
    return json.dumps(
        {
            "apiVersion": SILENCE_API_VERSION,
            "kind": "Silence",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def status(kube: KubeTestServer, namespace: str, name: str) -> dict[str, Any]:
    obj = get(kube, SILENCE, namespace, name)
    return dict((obj or {}).get("status") or {})


def event_reasons(kube: KubeTestServer, namespace: str, name: str) -> list[str]:
    done = kube.kubectl(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    items = json.loads(done.stdout or "{}").get("items", [])
    return [i["reason"] for i in items if i["involvedObject"]["kind"] == "Silence"]


def test_the_api_server_serves_the_silence_crd_and_enforces_its_bounds(
    installed: KubeTestServer, namespace: str
) -> None:
    future = datetime.now(UTC) + timedelta(hours=1)
    apply(installed, silence_manifest(namespace, "maintenance", endsAt=stamp(future), comment="upgrade"))
    table = installed.kubectl("get", "silences", "-n", namespace, check=True).stdout
    assert table.split("\n")[0].split() == ["NAME", "STATE", "ENDS", "HELD", "AGE"]
    listed = installed.kubectl("get", "notification-controller", "-n", namespace, "-o", "name", check=True)
    assert "silence.notification-controller.io/maintenance" in listed.stdout
    flux = installed.kubectl("get", "fluxcd", "-n", namespace, "-o", "name")
    assert "silence" not in flux.stdout  # not one of Flux's kinds

    too_many = [{"name": "kind", "value": "K"}] * 33
    refused = installed.kubectl(
        "apply", "-f", "-", input=silence_manifest(namespace, "huge", matchers=too_many, duration="1h")
    )
    assert refused.returncode != 0 and "spec.matchers" in refused.stderr, refused.stderr
    refused = installed.kubectl(
        "apply",
        "-f",
        "-",
        input=silence_manifest(
            namespace, "typo", matchers=[{"name": "colour", "value": "red"}], duration="1h"
        ),
    )
    assert refused.returncode != 0 and "spec.matchers.name" in refused.stderr, refused.stderr  # 1.20 says so


def test_a_silence_goes_pending_active_expired_holds_and_is_deleted_after_retention(
    installed: KubeTestServer, sa_kubeconfig: Path, namespace: str
) -> None:
    sink = ThreadedSink()
    controller = Controller(
        installed,
        sa_kubeconfig,
        "--silence-retention=4s",
        "--cluster-silences-namespace=" + NS,
        name="silence",
    )
    try:
        controller.wait_ready()
        apply(
            installed,
            textwrap.dedent(
                f"""\
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {namespace}}}
                spec: {{type: generic, address: "{sink.url}"}}
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Alert
                metadata: {{name: on-call, namespace: {namespace}}}
                spec:
                  providerRef: {{name: sink}}
                  eventSources: [{{kind: Kustomization, name: '*'}}]
                """
            ),
        )
        now = datetime.now(UTC)
        starts, ends = now + timedelta(seconds=6), now + timedelta(seconds=26)
        apply(
            installed,
            silence_manifest(
                namespace,
                "window",
                matchers=[{"name": "name", "value": "apps-.*", "matchType": "=~"}],
                startsAt=stamp(starts),
                endsAt=stamp(ends),
                summary=False,
            ),
        )
        apply(
            installed,
            silence_manifest(
                namespace,
                "broken",
                matchers=[{"name": "name", "value": "apps-(", "matchType": "=~"}],
                duration="1h",
            ),
        )
        apply(
            installed,
            silence_manifest(
                namespace,
                "everywhere",
                matchers=[{"name": "reason", "value": "NeverSent"}],  # holds nothing of this test
                duration="1h",
                allNamespaces=True,
            ),
        )

        assert wait_for(
            lambda: status(installed, namespace, "window").get("state") == "Pending", what="Pending"
        )
        assert status(installed, namespace, "window")["endsAt"] == stamp(ends)
        wait_for(
            lambda: condition(get(installed, SILENCE, namespace, "broken"), "Ready"), what="broken Ready"
        )
        ready = condition(get(installed, SILENCE, namespace, "broken"), "Ready")
        assert ready is not None and ready[:2] == ("False", "ValidationFailed")
        assert "spec.matchers[0].value" in ready[2] and "RE2" in ready[2]
        wait_for(
            lambda: condition(get(installed, SILENCE, namespace, "everywhere"), "Ready"), what="everywhere"
        )
        ready = condition(get(installed, SILENCE, namespace, "everywhere"), "Ready")
        assert ready is not None and ready[:2] == ("False", "AllNamespacesNotAllowed")
        assert f"only a Silence in namespace '{NS}'" in ready[2]

        wait_for(
            lambda: status(installed, namespace, "window").get("state") == "Active",
            timeout=30,
            what="Active at startsAt",
        )
        assert time.time() >= starts.timestamp() - 1  # not before its start (1 s: the API's precision)
        held = flux_event(namespace, "apps-frontend", "health check failed")
        held["severity"] = "error"
        assert post_event(controller, held) == 202
        passed = flux_event(namespace, "infra", "reconciled")
        assert post_event(controller, passed) == 202
        wait_for(lambda: "reconciled" in sink.messages(), what="the non-matching notification delivered")
        wait_for(
            lambda: status(installed, namespace, "window").get("held") == 1, timeout=30, what="status.held 1"
        )
        assert "health check failed" not in sink.messages()
        done = subprocess.run(
            [str(SCRIPT), "get", "silences", "-n", namespace, "--kubeconfig", str(installed.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        header, *rows = done.stdout.splitlines()
        assert header.split() == ["NAME", "READY", "STATE", "ENDS", "HELD", "MESSAGE"]
        window = next(r.split() for r in rows if r.startswith("window "))
        assert window[1:5] == ["True", "Active", stamp(ends), "1"], done.stdout

        wait_for(
            lambda: status(installed, namespace, "window").get("state") == "Expired",
            timeout=40,
            what="Expired at endsAt",
        )
        assert time.time() >= ends.timestamp() - 1
        reasons = event_reasons(installed, namespace, "window")
        assert "Active" in reasons and "Expired" in reasons, reasons
        wait_for(
            lambda: get(installed, SILENCE, namespace, "window") is None,
            timeout=30,
            what="deleted after --silence-retention",
        )
        assert get(installed, SILENCE, namespace, "broken") is not None  # not expired: kept
        assert "was deleted (--silence-retention 4s)" in controller.log()
    finally:
        controller.stop()
        sink.close()


@pytest.fixture(scope="module")
def bare_kube() -> Any:
    """A second API server with config/default installed WITHOUT the Silence CRD (a cluster that took an
    older install.yaml, or removed the CRD): the shared one has it."""
    binary = ensure_apiserver_binary()
    server = KubeTestServer(binary)
    server.start()
    try:
        server.kubectl("create", "namespace", NS, check=True)
        docs = [d for d in render_config() if d["metadata"]["name"] != SILENCE]
        crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
        rest = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
        for crd in crds:
            server.kubectl("create", "--validate=false", "-f", "-", input=json.dumps(crd), check=True)
        for crd in crds:
            name = crd["metadata"]["name"]
            server.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s", check=True)
        server.kubectl(
            "apply",
            "--validate=false",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rest}),
            check=True,
        )
        yield server
    finally:
        server.close()


def test_without_the_silence_crd_the_controller_runs_and_delivers(bare_kube: KubeTestServer) -> None:
    kubeconfig = bare_kube.create_service_account_kubeconfig(NS, "notification-controller")
    sink = ThreadedSink()
    controller = Controller(bare_kube, kubeconfig, name="no-silence-crd")
    try:
        controller.wait_ready()
        apply(
            bare_kube,
            textwrap.dedent(
                f"""\
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {NS}}}
                spec: {{type: generic, address: "{sink.url}"}}
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Alert
                metadata: {{name: on-call, namespace: {NS}}}
                spec:
                  providerRef: {{name: sink}}
                  eventSources: [{{kind: Kustomization, name: '*'}}]
                """
            ),
        )
        wait_for(lambda: condition(get(bare_kube, "alerts", NS, "on-call"), "Ready"), what="Alert reconciled")

        def delivered() -> bool:
            post_event(controller, flux_event(NS, "apps", "still here"))
            return "still here" in sink.messages()

        wait_for(delivered, timeout=30, what="an event delivered without the Silence CRD")
        log = controller.log()
        assert log.count("is not available (the CRD is not installed)") == 1, log[-3000:]
        done = subprocess.run(
            [str(SCRIPT), "get", "silences", "-A", "--kubeconfig", str(bare_kube.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1
        assert done.stderr == "error: silences.notification-controller.io is not installed in this cluster\n"
        assert controller.proc.poll() is None
    finally:
        controller.stop()
        sink.close()


def served(informer: Informer) -> bool | None:
    return informer.available


async def test_the_informer_finds_the_crd_when_it_is_installed_later(bare_kube: KubeTestServer) -> None:
    """Looked for again every ``discovery_interval`` (60 s in the controller; 0.5 s here): once the CRD is
    served, Silences are listed and watched like the other kinds."""
    client = await KubeClient.connect(str(bare_kube.kubeconfig))
    store = ObjectStore()
    informer = Informer(
        client, store, SILENCES, optional=True, discovery_interval=0.5, backoff=Backoff(initial=0.2, cap=1.0)
    )
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        assert served(informer) is False and store.silences() == []
        crd = (ROOT / "config" / "crd" / "bases" / "notification-controller.io_silences.yaml").read_text()
        await asyncio.to_thread(
            bare_kube.kubectl, "create", "--validate=false", "-f", "-", input=crd, check=True
        )
        await asyncio.to_thread(
            bare_kube.kubectl,
            "wait",
            "--for=condition=Established",
            f"crd/{SILENCE}",
            "--timeout=60s",
            check=True,
        )
        await asyncio.to_thread(
            bare_kube.kubectl,
            "apply",
            "-f",
            "-",
            input=silence_manifest(NS, "late", duration="1h"),
            check=True,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while store.silence(NS, "late") is None:
            assert loop.time() < deadline, "the Silence never reached the cache"
            await asyncio.sleep(0.1)
        assert served(informer) is True
        await asyncio.to_thread(bare_kube.kubectl, "delete", SILENCE, "late", "-n", NS, check=True)
        while store.silence(NS, "late") is not None:
            assert loop.time() < deadline + 30, "the deletion never reached the cache"
            await asyncio.sleep(0.1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def test_without_rbac_on_silences_the_informer_says_so_once_and_counts_as_synced(
    installed: KubeTestServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An install whose ClusterRole predates Silences (403): a warning once, synced empty, asked again."""
    kubeconfig = installed.create_service_account_kubeconfig(namespace, "no-silences")
    client = await KubeClient.connect(str(kubeconfig))
    store = ObjectStore()
    informer = Informer(client, store, SILENCES, namespace=namespace, optional=True, discovery_interval=0.2)
    task = asyncio.create_task(informer.run())
    try:
        with caplog.at_level("INFO", logger="notification_controller.kube.informer"):
            await asyncio.wait_for(informer.synced.wait(), 30)
            await asyncio.sleep(1.0)  # several more looks (every 0.2 s)
        said = [r for r in caplog.records if "does not grant list/watch" in r.getMessage()]
        assert len(said) == 1 and said[0].levelname == "WARNING", [r.getMessage() for r in said]
        assert served(informer) is False and store.silences() == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def test_delete_carries_the_uid_as_a_precondition(installed: KubeTestServer, namespace: str) -> None:
    """Retention never deletes a newer Silence of the same name: the API server refuses another uid (409)."""
    apply(installed, silence_manifest(namespace, "old", duration="1h"))
    found = get(installed, SILENCE, namespace, "old")
    assert found is not None
    client = await KubeClient.connect(str(installed.kubeconfig))
    try:
        cluster = KubeCluster(client)
        stale = ObjectRef(
            SILENCE_API_VERSION, "Silence", namespace, "old", "00000000-0000-0000-0000-000000000000"
        )
        with pytest.raises(KubeError) as refused:
            await cluster.delete(stale)
        assert refused.value.conflict, refused.value
        assert get(installed, SILENCE, namespace, "old") is not None
        await cluster.delete(
            ObjectRef(SILENCE_API_VERSION, "Silence", namespace, "old", found["metadata"]["uid"])
        )
        assert get(installed, SILENCE, namespace, "old") is None
        with pytest.raises(KubeError) as gone:
            await cluster.delete(stale)
        assert gone.value.not_found
    finally:
        await client.close()

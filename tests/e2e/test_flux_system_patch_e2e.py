"""The ``flux-system`` patch of ``make release`` on a real API server (issue 25, docs/install.md).

A cluster made by ``flux bootstrap`` is modelled by Flux's own install of the notification-controller
(tests/data/flux-install/gotk-components.yaml, Flux v2.9.4). Its ``flux-system/kustomization.yaml`` gets the one
``components:`` line docs/install.md gives, is rendered with ``kubectl kustomize`` (what kustomize-controller
does with it) and applied to a kube-apiserver of its own (a fresh one: no CRD, RBAC or Deployment left by other
e2e tests can make a check pass). Then:

* our image on Flux's Deployment, Flux's args kept; Flux's labels on every object, found by the label selectors
  ``flux check`` and ``flux logs`` use;
* our CRDs: an Alert with ``spec.filter``, ``threshold`` and ``template`` (fields Flux's schema prunes) is stored
  and read back whole; the same Alert on Flux's CRDs loses them (the control: the check can fail);
* the controller works with exactly that RBAC: it runs as the manifest's ServiceAccount (a TokenRequest token),
  with the Deployment's own args, its Alert and Provider become Ready and an event is delivered to a sink.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from notification_controller.objects.yamldoc import BaseLoader as KubeYAML  # kustomize writes `=` plain
from tests.e2e.apiserver import KubeTestServer, KubeTestServerError, ensure_apiserver_binary
from tests.e2e.controllerkit import (
    NS,
    ROOT,
    Controller,
    ThreadedSink,
    apply,
    flux_event,
    get,
    post_event,
    ready,
    wait_for,
)

pytestmark = pytest.mark.e2e

FIXTURE = ROOT / "tests" / "data" / "flux-install" / "gotk-components.yaml"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
IMAGE = "registry.example/platform/notification-controller"
PART_OF = "app.kubernetes.io/part-of=flux"
Obj = dict[str, Any]


def _render(repo: Path) -> list[Obj]:
    out = subprocess.run(
        ["/usr/bin/kubectl", "kustomize", str(repo)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [d for d in yaml.load_all(out, Loader=KubeYAML) if d]


def bootstrap_repo(tmp: Path, *, with_component: bool) -> Path:
    """flux-system/ of a bootstrap repository (gotk-sync.yaml left out: no source/kustomize CRDs here)."""
    repo = tmp / ("flux-system" if with_component else "flux-system-before")
    repo.mkdir(parents=True)
    shutil.copy(FIXTURE, repo / "gotk-components.yaml")
    lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization", "resources:"]
    lines.append("- gotk-components.yaml")
    if with_component:
        dist = tmp / "dist"
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "release.py"), "--image", IMAGE, "--out", str(dist)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        shutil.copytree(dist / "flux-system" / "notification-controller", repo / "notification-controller")
        lines += ["components:", "- notification-controller"]  # docs/install.md, step 3
    (repo / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return repo


def install(kube: KubeTestServer, objects: list[Obj]) -> None:
    """As kustomize-controller applies: namespaces and CRDs first, then the rest. CRDs are created with
    ``--validate=false`` because this 1.20 server rejects ``x-kubernetes-validations`` on apply (and drops them on
    create; the controller enforces those rules itself)."""
    first = [o for o in objects if o["kind"] == "Namespace"]
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    rest = [o for o in objects if o not in first and o not in crds]
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(first), check=True)
    for crd in crds:
        kube.kubectl("create", "--validate=false", "-f", "-", input=yaml.safe_dump(crd), check=True)
    for crd in crds:
        kube.kubectl(
            "wait",
            "--for=condition=Established",
            f"crd/{crd['metadata']['name']}",
            "--timeout=60s",
            check=True,
        )
    if rest:
        kube.kubectl("apply", "--validate=false", "-f", "-", input=yaml.safe_dump_all(rest), check=True)


def _fresh_server() -> KubeTestServer:
    try:
        server = KubeTestServer(ensure_apiserver_binary())
        server.start()
    except (KubeTestServerError, OSError) as exc:
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"e2e kube-apiserver unavailable (CI=true): {exc}", pytrace=False)
        pytest.skip(f"e2e kube-apiserver unavailable: {exc}")
    return server


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeTestServer, list[Obj]]]:
    """A fresh API server with the patched flux-system kustomization applied."""
    objects = _render(bootstrap_repo(tmp_path_factory.mktemp("bootstrap"), with_component=True))
    server = _fresh_server()
    try:
        install(server, objects)
        yield server, objects
    finally:
        server.close()


def _names(kube: KubeTestServer, resource: str, *, namespaced: bool = True) -> set[str]:
    args = ["get", resource, "-l", PART_OF, "-o", "json"]
    if namespaced:
        args[1:1] = ["-n", NS]
    listing = json.loads(kube.kubectl(*args, check=True).stdout)
    return {item["metadata"]["name"] for item in listing["items"]}


def test_our_image_on_fluxs_deployment(patched: tuple[KubeTestServer, list[Obj]]) -> None:
    kube, _ = patched
    deployment = get(kube, "deployment", NS, "notification-controller")
    assert deployment is not None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{IMAGE}:{VERSION}"
    assert container["args"] == [  # Flux's (what `flux bootstrap` set is kept); the last test runs with them
        "--watch-all-namespaces=true",
        "--log-level=info",
        "--log-encoding=json",
        "--enable-leader-election",
    ]
    # Flux's contract kept: names, ports, probes, selector, ServiceAccount.
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 9090,
        "http-webhook": 9292,
        "http-prom": 8080,
        "healthz": 9440,
    }
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz", "scheme": "HTTP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz", "scheme": "HTTP"}
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "notification-controller"}}
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "notification-controller"


def test_fluxs_labels_on_every_object_as_flux_check_and_logs_select_them(
    patched: tuple[KubeTestServer, list[Obj]],
) -> None:
    kube, objects = patched
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "flux", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/instance"] == "flux-system", obj["metadata"]["name"]
    # flux check / flux logs: Deployments labelled part-of=flux in flux-system, then pods by the template's labels;
    # CRDs labelled part-of=flux.
    assert _names(kube, "deployments") == {"notification-controller"}
    assert _names(kube, "services") == {"notification-controller", "webhook-receiver"}
    crds = _names(kube, "crds", namespaced=False)
    assert crds == {f"{p}.notification.toolkit.fluxcd.io" for p in ("alerts", "providers", "receivers")} | {
        "silences.notification-controller.io"  # ours (issue 26), added by the component with Flux's labels
    }
    for crd in crds:  # flux check prints each CRD's last stored version and fails without one
        found = get(kube, "crd", "", crd)
        assert found is not None
        assert found["status"]["storedVersions"] in (["v1beta3"], ["v1"], ["v1alpha1"]), crd
    deployment = get(kube, "deployment", NS, "notification-controller")
    assert deployment is not None
    template = deployment["spec"]["template"]["metadata"]["labels"]
    assert template["app"] == "notification-controller"
    assert template["app.kubernetes.io/component"] == "notification-controller"
    assert deployment["metadata"]["labels"]["control-plane"] == "controller"
    stored = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for kind, name in stored:
        namespaced = kind not in (
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
        )
        found = get(kube, kind, NS if namespaced else "", name)
        assert found is not None, (kind, name)
        assert found["metadata"]["labels"]["app.kubernetes.io/part-of"] == "flux", (kind, name)


ALERT = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: {ns}}}
spec: {{type: generic, address: "{address}"}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: noisy, namespace: {ns}}}
spec:
  providerRef: {{name: sink}}
  eventSeverity: info
  eventSources: [{{kind: Kustomization, name: '*'}}]
  filter: "event.reason == 'ReconciliationSucceeded'"
  threshold: {{count: 1, within: 10m}}
  template: {{message: "{{{{ event.message }}}} (via the flux-system patch)"}}
"""


def _our_fields(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: spec.get(k) for k in ("filter", "threshold", "template")}


def test_our_crds_keep_the_extra_fields_of_a_stored_alert(patched: tuple[KubeTestServer, list[Obj]]) -> None:
    kube, _ = patched
    kube.kubectl("create", "namespace", "crd-fields")
    apply(kube, ALERT.format(ns="crd-fields", address="http://127.0.0.1:1/unused"))
    alert = get(kube, "alert", "crd-fields", "noisy")
    assert alert is not None
    assert _our_fields(alert["spec"]) == {
        "filter": "event.reason == 'ReconciliationSucceeded'",
        "threshold": {"count": 1, "within": "10m"},
        "template": {"message": "{{ event.message }} (via the flux-system patch)"},
    }


def test_control_fluxs_own_crds_prune_those_fields(tmp_path: Path) -> None:
    """Without the component (Flux's CRDs) the same Alert loses them: the check above can fail."""
    kube = _fresh_server()
    try:
        flux_only = _render(bootstrap_repo(tmp_path, with_component=False))
        install(kube, [o for o in flux_only if o["kind"] in ("Namespace", "CustomResourceDefinition")])
        kube.kubectl("create", "namespace", "crd-fields", check=True)
        apply(kube, ALERT.format(ns="crd-fields", address="http://127.0.0.1:1/unused"))
        alert = get(kube, "alert", "crd-fields", "noisy")
        assert alert is not None
        assert _our_fields(alert["spec"]) == {"filter": None, "threshold": None, "template": None}
    finally:
        kube.close()


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    server = ThreadedSink()
    yield server
    server.close()


def test_the_controller_works_with_exactly_that_rbac(
    patched: tuple[KubeTestServer, list[Obj]], sink: ThreadedSink
) -> None:
    """As the manifest's ServiceAccount (Flux's crd-controller role plus ours, nothing else) and with the
    Deployment's own args: objects become Ready, an event reaches the sink through our template."""
    kube, objects = patched
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    kubeconfig = kube.create_service_account_kubeconfig(NS, "notification-controller")
    kube.kubectl("create", "namespace", "apps", check=True)
    apply(kube, ALERT.format(ns="apps", address=f"{sink.url}/flux"))
    # The Deployment's args last (argparse: the last value wins over the kit's console/debug defaults).
    controller = Controller(kube, kubeconfig, *args, name="flux-system-patch")
    try:
        controller.wait_ready(timeout=90)
        for kind, name in (("provider", "sink"), ("alert", "noisy")):

            def is_ready(kind: str = kind, name: str = name) -> bool:
                return (ready(get(kube, kind, "apps", name)) or ("",))[0] == "True"

            wait_for(is_ready, timeout=60, what=f"{kind} Ready")
        lease = get(kube, "lease", NS, "notification-controller-leader-election")  # --enable-leader-election
        assert lease is not None
        assert lease["spec"].get("holderIdentity")
        assert post_event(controller, flux_event("apps", "podinfo", "deployed")) == 202
        wait_for(lambda: sink.messages(), timeout=30, what="delivery")
        assert sink.messages() == ["deployed (via the flux-system patch)"]
        log = controller.log()
        assert "forbidden" not in log.lower(), log[-3000:]
    finally:
        code = controller.stop()
    assert code == 0, controller.log()[-3000:]


def test_going_back_renders_fluxs_install_unchanged(tmp_path: Path) -> None:
    """docs/install.md, "Back to Flux's controller": without the components line the render is Flux's own."""
    before = _render(bootstrap_repo(tmp_path, with_component=False))
    original = [d for d in yaml.safe_load_all(FIXTURE.read_text()) if d]
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(before, key=key) == sorted(original, key=key)
    assert textwrap.dedent(FIXTURE.read_text()).count("ghcr.io/fluxcd/notification-controller:v1.9.3") == 1

"""``make release`` (scripts/release.py) renders what docs/install.md promises, checked with kubectl's kustomize.

* ``dist/install.yaml``: config/default with the image pinned by tag and Flux's labels plus the version.
* The flux-system Component rendered over Flux's own install (tests/data/flux-install/gotk-components.yaml), as
  kustomize-controller would: our CRDs and image on Flux's objects, every object of Flux still there with the same
  name, labels, selector, ports and probes, nothing of Flux's removed, and without the component the render is
  Flux's again (the way back). tests/e2e/test_flux_system_patch_e2e.py applies the same render to an API server.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from notification_controller.cli import parse_args
from notification_controller.objects.yamldoc import BaseLoader as KubeYAML  # kustomize writes `=` plain

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "flux-install" / "gotk-components.yaml"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
IMAGE = "registry.example:5000/team/notification-controller"
_KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(_KUBECTL is None, reason="kubectl is not installed")

Obj = dict[str, Any]
FLUX_LABELS = {"app.kubernetes.io/part-of": "flux", "app.kubernetes.io/instance": "flux-system"}


def _release(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "release.py"), "--image", IMAGE, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _kustomize(directory: Path) -> list[Obj]:
    assert _KUBECTL is not None
    done = subprocess.run(
        [_KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.load_all(done.stdout, Loader=KubeYAML) if d]


def _key(obj: Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def flux_system(tmp: Path, dist: Path | None) -> list[Obj]:
    """A bootstrap repository's flux-system/ with (or without) the component, rendered."""
    repo = tmp / ("with" if dist else "without")
    repo.mkdir()
    shutil.copy(FIXTURE, repo / "gotk-components.yaml")
    kustomization: Obj = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["gotk-components.yaml"],
    }
    if dist:
        shutil.copytree(dist / "flux-system" / "notification-controller", repo / "notification-controller")
        kustomization["components"] = ["notification-controller"]
    (repo / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return _kustomize(repo)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "dist"
    done = _release(out)
    assert done.returncode == 0, done.stderr
    return out


def test_install_manifest_pins_the_image_and_carries_fluxs_labels(dist: Path) -> None:
    objects = [d for d in yaml.safe_load_all((dist / "install.yaml").read_text()) if d]
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == sorted(
        {
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "NetworkPolicy",
        }
    )
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{IMAGE}:{VERSION}"
    labels = {**FLUX_LABELS, "app.kubernetes.io/component": "notification-controller"}
    labels["app.kubernetes.io/version"] = VERSION
    for obj in objects:
        assert labels.items() <= obj["metadata"]["labels"].items(), _key(obj)
    assert labels.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert (dist / "VERSION").read_text() == VERSION + "\n"


@pytest.mark.parametrize(("variant", "store"), [("persistent", "--store=sqlite:"), ("ha", "--store=nats://")])
def test_durable_variants_pin_the_same_image(dist: Path, variant: str, store: str) -> None:
    objects = [d for d in yaml.safe_load_all((dist / f"install-{variant}.yaml").read_text()) if d]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{IMAGE}:{VERSION}"
    assert any(a.startswith(store) for a in container["args"])
    assert deployment["metadata"]["labels"]["app.kubernetes.io/version"] == VERSION
    nats = [d for d in yaml.safe_load_all((dist / "nats.yaml").read_text()) if d]
    assert {o["kind"] for o in nats} >= {"StatefulSet", "Service", "ConfigMap"}


def test_a_version_other_than_pyprojects_is_refused(tmp_path: Path) -> None:
    done = _release(tmp_path / "dist", "--version", "99.0.0")
    assert done.returncode == 2
    assert "pyproject.toml" in done.stderr
    assert not (tmp_path / "dist").exists()
    tagged = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "release.py"),
            "--image",
            IMAGE + ":v1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert tagged.returncode == 2
    assert "without a tag" in tagged.stderr


def test_the_component_puts_our_crds_and_image_on_fluxs_objects(dist: Path, tmp_path: Path) -> None:
    flux = {_key(o): o for o in flux_system(tmp_path, None)}
    ours = {_key(o): o for o in flux_system(tmp_path, dist)}
    installed = {_key(o): o for o in yaml.safe_load_all((dist / "install.yaml").read_text()) if o}
    # Nothing of Flux's is removed; what is added is our RBAC and our own CRD (Silence), under names Flux does
    # not use.
    assert flux.keys() <= ours.keys()
    assert sorted(ours.keys() - flux.keys()) == sorted(
        [
            ("CustomResourceDefinition", "silences.notification-controller.io"),
            ("ClusterRole", "notification-controller"),
            ("ClusterRoleBinding", "notification-controller"),
            ("Role", "notification-controller-leader-election"),
            ("RoleBinding", "notification-controller-leader-election"),
        ]
    )
    for key, obj in ours.items():
        assert FLUX_LABELS.items() <= obj["metadata"]["labels"].items(), key
    # CRDs: our schema (spec.filter, threshold, template ...), Flux's metadata.
    for plural in ("alerts", "providers", "receivers"):
        key = ("CustomResourceDefinition", f"{plural}.notification.toolkit.fluxcd.io")
        assert ours[key]["spec"] == installed[key]["spec"]
        assert ours[key]["metadata"]["labels"] == flux[key]["metadata"]["labels"]
        assert ours[key]["spec"] != flux[key]["spec"]
    silences = ("CustomResourceDefinition", "silences.notification-controller.io")
    assert ours[silences]["spec"] == installed[silences]["spec"]  # the Silence CRD of install.yaml, as it is
    alert_spec = ours[("CustomResourceDefinition", "alerts.notification.toolkit.fluxcd.io")]["spec"]
    props = alert_spec["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"filter", "threshold", "template"} <= props.keys()
    # The Deployment: our image and grace period; Flux's name, selector, labels, ports, probes, account and args
    # (what `flux bootstrap` set is kept; ours parse them).
    theirs = flux[("Deployment", "notification-controller")]
    mine = ours[("Deployment", "notification-controller")]
    (container,) = mine["spec"]["template"]["spec"]["containers"]
    (flux_container,) = theirs["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{IMAGE}:{VERSION}"
    assert container["args"] == flux_container["args"]
    parse_args(container["args"], environ={})
    same = copy.deepcopy(mine)
    same["spec"]["template"]["spec"]["containers"][0].update(image=flux_container["image"])
    same["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = theirs["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    assert same == theirs
    # Everything else of Flux's is untouched (Services, ServiceAccount, network policies, Flux's RBAC).
    for key in flux.keys() - {k for k in flux if k[0] in ("CustomResourceDefinition", "Deployment")}:
        assert ours[key] == flux[key], key


def test_args_patches_of_the_user_still_apply_after_the_component(dist: Path, tmp_path: Path) -> None:
    """docs/install.md: `--store=...` goes in flux-system/kustomization.yaml's own patches, after the component."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(FIXTURE, repo / "gotk-components.yaml")
    shutil.copytree(dist / "flux-system" / "notification-controller", repo / "notification-controller")
    (repo / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["gotk-components.yaml"],
                "components": ["notification-controller"],
                "patches": [
                    {
                        "target": {"kind": "Deployment", "name": "notification-controller"},
                        "patch": "- op: add\n  path: /spec/template/spec/containers/0/args/-\n"
                        "  value: --store=sqlite:/var/lib/notification-controller/state.db\n",
                    }
                ],
            }
        )
    )
    (deployment,) = [o for o in _kustomize(repo) if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "--store=sqlite:/var/lib/notification-controller/state.db"
    assert "--log-encoding=json" in args


GOTK_SYNC = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: flux-system, namespace: flux-system}
spec: {interval: 1m0s, ref: {branch: main}, secretRef: {name: flux-system}, url: ssh://git@example.com/fleet}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: flux-system, namespace: flux-system}
spec: {interval: 10m0s, path: ./clusters/my-cluster, prune: true, sourceRef: {kind: GitRepository, name: flux-system}}
"""


def _doc_files(scenario: str) -> dict[str, str]:
    """The ``# file: flux-system/<name> (<scenario>)`` blocks of docs/install.md."""
    text = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    files: dict[str, str] = {}
    for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL):
        lines = textwrap.dedent(block).splitlines()
        match = re.fullmatch(r"# file: flux-system/(\S+) \((\w+)\)", lines[0].strip())
        if match and match.group(2) == scenario:
            files[match.group(1)] = "\n".join(lines[1:]) + "\n"
    return files


@pytest.mark.parametrize("scenario", ["bootstrap", "persistent", "ha"])
def test_the_flux_system_files_of_docs_install_render(dist: Path, tmp_path: Path, scenario: str) -> None:
    """What docs/install.md tells a bootstrap user to write, rendered on Flux's files as kustomize-controller would."""
    files = _doc_files(scenario)
    assert "kustomization.yaml" in files
    repo = tmp_path / "flux-system"
    repo.mkdir()
    shutil.copy(FIXTURE, repo / "gotk-components.yaml")
    (repo / "gotk-sync.yaml").write_text(GOTK_SYNC)
    shutil.copytree(dist / "flux-system" / "notification-controller", repo / "notification-controller")
    shutil.copy(dist / "nats.yaml", repo / "nats.yaml")
    for name, text in files.items():
        (repo / name).write_text(text)
    objects = _kustomize(repo)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"{IMAGE}:{VERSION}"
    settings = parse_args(container["args"], environ={})
    if scenario == "persistent":
        assert settings.store.url.startswith("sqlite:")
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
        claim = {v["name"]: v for v in pod["volumes"]}["state"]["persistentVolumeClaim"]["claimName"]
        assert any(o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == claim for o in objects)
        assert {"name": "state", "mountPath": "/var/lib/notification-controller"} in container["volumeMounts"]
    elif scenario == "ha":
        assert settings.store.url.startswith("nats://nats.flux-system.svc:4222")
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0}
        (budget,) = [o for o in objects if _key(o) == ("PodDisruptionBudget", "notification-controller")]
        assert budget["spec"]["selector"] == deployment["spec"]["selector"]
        assert any(o["kind"] == "StatefulSet" and o["metadata"]["name"] == "nats" for o in objects)
    else:
        assert settings.store.url == "memory"

"""The durable-delivery overlays render what docs/delivery.md promises (``kubectl kustomize``).

``config/ha``: two replicas spread over nodes, a PodDisruptionBudget, leader election, ``--store=nats://``.
``config/persistent``: one replica, Recreate (a ReadWriteOnce volume), ``--store=sqlite:`` on the volume.
Both keep the base's security context, and their args parse with the CLI.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from notification_controller.cli import parse_args
from notification_controller.objects.yamldoc import BaseLoader as KubeYAML  # kustomize writes `=` plain

CONFIG = Path(__file__).resolve().parents[2] / "config"
_KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(_KUBECTL is None, reason="kubectl is not installed")

Obj = dict[str, Any]


def _render(overlay: str) -> list[Obj]:
    assert _KUBECTL is not None
    done = subprocess.run(
        [_KUBECTL, "kustomize", str(CONFIG / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.load_all(done.stdout, Loader=KubeYAML) if d]


def _only(objects: list[Obj], kind: str) -> Obj:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


def _base_container_security() -> Obj:
    (container,) = _only(_render("default"), "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(container["securityContext"])


def test_ha_overlay() -> None:
    objects = _render("ha")
    deployment = _only(objects, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0  # a rollout never drops to zero
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = _only(objects, "PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == "flux-system" and pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["containers"]
    assert container["securityContext"] == _base_container_security()
    settings = parse_args(container["args"], environ={"RUNTIME_NAMESPACE": "flux-system"})
    assert settings.store.url.startswith("nats://")
    assert settings.leader.enabled is True  # reconcilers stay leader-elected
    assert settings.kube.watch_all_namespaces is True


def test_persistent_overlay() -> None:
    objects = _render("persistent")
    spec = _only(objects, "Deployment")["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}  # ReadWriteOnce: the old pod lets go first
    (container,) = pod["containers"]
    assert container["securityContext"] == _base_container_security()  # root stays read-only
    settings = parse_args(container["args"], environ={"RUNTIME_NAMESPACE": "flux-system"})
    assert settings.store.url.startswith("sqlite:")
    db = PurePosixPath(settings.store.url.removeprefix("sqlite:"))
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert db.parent == PurePosixPath(mounts["state"])  # the file is on the volume, not the read-only root
    volumes = {v["name"]: v for v in pod["volumes"]}
    claim = volumes["state"]["persistentVolumeClaim"]["claimName"]
    pvc = _only(objects, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == claim and pvc["metadata"]["namespace"] == "flux-system"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pod["securityContext"]["fsGroup"] == 65534  # the non-root user can write the volume

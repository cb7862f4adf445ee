"""config/nats, the NATS that config/ha points at (issue 25), renders and agrees with it.

Three JetStream nodes (R3 in docs/delivery.md), a Service at the address config/ha's ``--store`` names, one DNS
name per pod for the cluster routes, and a nats.conf that nats-server itself accepts (``nats-server -t``, with the
pod name the StatefulSet gives it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def _one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    (obj,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return obj


def test_the_service_is_the_address_config_ha_gives_the_controller() -> None:
    objects = _render("nats")
    ha = _one(_render("ha"), "Deployment")
    (store,) = [
        a for a in ha["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--store=")
    ]
    match = re.match(r"--store=nats://([^.]+)\.([^.]+)\.svc:(\d+)(?:[,?].*)?$", store)
    assert match, store
    service = _one(objects, "Service", match.group(1))
    assert service["metadata"]["namespace"] == match.group(2)
    assert [p["port"] for p in service["spec"]["ports"]] == [int(match.group(3))]
    statefulset = _one(objects, "StatefulSet")
    assert (
        service["spec"]["selector"].items() <= statefulset["spec"]["template"]["metadata"]["labels"].items()
    )


def test_three_nodes_route_to_each_other_by_the_headless_service() -> None:
    objects = _render("nats")
    statefulset = _one(objects, "StatefulSet")
    assert statefulset["spec"]["replicas"] == 3
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"
    headless = _one(objects, "Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    conf = _one(objects, "ConfigMap")["data"]["nats.conf"]
    routes = re.findall(r"nats://([\w-]+)\.([\w-]+):6222", conf)
    name = statefulset["metadata"]["name"]
    assert routes == [(f"{name}-{i}", headless["metadata"]["name"]) for i in range(3)]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["image"].rpartition(":")[2] not in ("", "latest")
    assert {v["mountPath"] for v in container["volumeMounts"]} >= {"/data", "/etc/nats"}
    assert "store_dir: /data/jetstream" in conf
    # The ConfigMap name kustomize hashes is the one the pod mounts.
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == _one(objects, "ConfigMap")["metadata"]["name"]


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server is not installed")
def test_nats_server_accepts_the_configuration(tmp_path: Path) -> None:
    conf = _one(_render("nats"), "ConfigMap")["data"]["nats.conf"]
    (tmp_path / "nats.conf").write_text(conf)

    def check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["nats-server", "-c", "nats.conf", "-t"],
            cwd=tmp_path,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    ok = check({"SERVER_NAME": "nats-0"})
    assert ok.returncode == 0, ok.stderr
    assert "valid" in ok.stdout + ok.stderr
    # The control: without the name the StatefulSet provides, nats-server refuses it.
    env = {k: v for k, v in os.environ.items() if k != "SERVER_NAME"}
    missing = subprocess.run(
        ["nats-server", "-c", "nats.conf", "-t"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert missing.returncode != 0

"""Smoke tests proving the e2e kube-apiserver is a real one (etcd storage, CRDs, RBAC)."""

from __future__ import annotations

import json
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.apiserver import KubeTestServer

CRD_NAME = "widgets.smoke.example.com"
CRD_YAML = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.smoke.example.com
spec:
  group: smoke.example.com
  scope: Namespaced
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  versions:
    - name: v1
      served: true
      storage: true
      subresources:
        status: {}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [size]
              properties:
                size:
                  type: integer
                  minimum: 1
            status:
              type: object
              properties:
                ready:
                  type: boolean
"""


def _json(proc_stdout: str) -> dict[str, Any]:
    obj = json.loads(proc_stdout)
    assert isinstance(obj, dict)
    return obj


def _token_of(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text())
    token = config["users"][0]["user"]["token"]
    assert isinstance(token, str)
    return token


def _wait_for_status(
    kube: KubeTestServer, path: str, token: str, want: int, timeout: float = 20.0
) -> tuple[int, Any]:
    """RBAC changes reach the authorizer through an informer: poll briefly."""
    deadline = time.monotonic() + timeout
    status, body = kube.request("GET", path, token=token)
    while status != want and time.monotonic() < deadline:
        time.sleep(0.2)
        status, body = kube.request("GET", path, token=token)
    return status, body


def test_server_is_a_real_kube_apiserver(kube: KubeTestServer) -> None:
    status, version = kube.request("GET", "/version")
    assert status == 200
    assert version["gitVersion"] == "v1.20.2"
    # Authentication is enforced: a wrong token is rejected.
    status, _ = kube.request("GET", "/api/v1/namespaces", token="not-a-valid-token")
    assert status == 401
    # The kubeconfig written for kubectl works.
    proc = kube.kubectl("get", "namespace", "kube-system", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert _json(proc.stdout)["metadata"]["name"] == "kube-system"


def test_configmap_roundtrip(kube: KubeTestServer, namespace: str) -> None:
    created = kube.kubectl(
        "-n", namespace, "create", "configmap", "smoke", "--from-literal=greeting=hello", "-o", "json"
    )
    assert created.returncode == 0, created.stderr
    uid = _json(created.stdout)["metadata"]["uid"]

    got = kube.kubectl("-n", namespace, "get", "configmap", "smoke", "-o", "json")
    assert got.returncode == 0, got.stderr
    cm = _json(got.stdout)
    assert cm["data"] == {"greeting": "hello"}
    assert cm["metadata"]["uid"] == uid

    status, body = kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/smoke")
    assert status == 200
    assert body["data"]["greeting"] == "hello"
    missing = kube.kubectl("-n", namespace, "get", "configmap", "does-not-exist")
    assert missing.returncode != 0
    assert "NotFound" in missing.stderr


def test_crd_and_custom_object(kube: KubeTestServer, namespace: str) -> None:
    applied = kube.kubectl("apply", "--validate=false", "-f", "-", input=CRD_YAML)
    assert applied.returncode == 0, applied.stderr
    waited = kube.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    assert waited.returncode == 0, waited.stderr

    widget = {
        "apiVersion": "smoke.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": namespace},
        "spec": {"size": 3, "unknownField": "pruned"},
    }
    # The discovery of a brand-new CRD can lag behind Established: retry briefly.
    deadline = time.monotonic() + 30
    while True:
        created = kube.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(widget))
        if created.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert created.returncode == 0, created.stderr

    path = f"/apis/smoke.example.com/v1/namespaces/{namespace}/widgets/w1"
    status, body = kube.request("GET", path)
    assert status == 200, body
    assert body["kind"] == "Widget"
    assert body["spec"] == {"size": 3}, "structural schema should prune unknown fields"

    # The openAPIV3Schema is enforced.
    bad = {**widget, "metadata": {"name": "w2"}, "spec": {"size": "big"}}
    status, body = kube.request("POST", f"/apis/smoke.example.com/v1/namespaces/{namespace}/widgets", bad)
    assert status == 422, body
    assert "spec.size" in json.dumps(body)

    # The status subresource: writes to /status land, status in the main resource is ignored.
    status, body = kube.request(
        "PATCH", path + "/status", {"status": {"ready": True}}, content_type="application/merge-patch+json"
    )
    assert status == 200, body
    assert body["status"] == {"ready": True}
    status, body = kube.request(
        "PATCH", path, {"status": {"ready": False}}, content_type="application/merge-patch+json"
    )
    assert status == 200, body
    assert body["status"] == {"ready": True}


@pytest.mark.parametrize("legacy", [False, True], ids=["token-request", "legacy-secret-token"])
def test_service_account_rbac(kube: KubeTestServer, namespace: str, legacy: bool) -> None:
    sa = kube.kubectl("-n", namespace, "create", "serviceaccount", "robot")
    assert sa.returncode == 0, sa.stderr
    kubeconfig = kube.create_service_account_kubeconfig(namespace, "robot", legacy=legacy)
    token = _token_of(kubeconfig)
    assert token != kube.token
    path = f"/api/v1/namespaces/{namespace}/configmaps"

    # Authenticated as the ServiceAccount, but RBAC grants nothing yet.
    status, body = kube.request("GET", path, token=token)
    assert status == 403, body
    assert f"system:serviceaccount:{namespace}:robot" in body["message"]
    denied = kube.kubectl("get", "configmaps", kubeconfig=kubeconfig)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()

    rbac = f"""\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: cm-reader, namespace: {namespace}}}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: robot-cm-reader, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-reader}}
subjects:
  - {{kind: ServiceAccount, name: robot, namespace: {namespace}}}
"""
    applied = kube.kubectl("apply", "--validate=false", "-f", "-", input=rbac)
    assert applied.returncode == 0, applied.stderr

    status, body = _wait_for_status(kube, path, token, 200)
    assert status == 200, body
    assert body["kind"] == "ConfigMapList"
    allowed = kube.kubectl("get", "configmaps", "-o", "json", kubeconfig=kubeconfig)
    assert allowed.returncode == 0, allowed.stderr
    # The Role is namespaced: other namespaces and other verbs stay forbidden.
    status, _ = kube.request("GET", "/api/v1/namespaces/default/configmaps", token=token)
    assert status == 403
    status, _ = kube.request(
        "POST",
        path,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nope"}},
        token=token,
    )
    assert status == 403

    # Deleting the ServiceAccount invalidates its tokens (service-account lookup is on).
    deleted = kube.kubectl("-n", namespace, "delete", "serviceaccount", "robot")
    assert deleted.returncode == 0, deleted.stderr
    status, _ = _wait_for_status(kube, path, token, 401)
    assert status == 401


def test_apiserver_restart_keeps_data(kube: KubeTestServer, namespace: str) -> None:
    created = kube.kubectl(
        "-n", namespace, "create", "configmap", "survivor", "--from-literal=k=v", "-o", "json"
    )
    assert created.returncode == 0, created.stderr
    before = _json(created.stdout)["metadata"]
    url_before = kube.url

    kube.stop_apiserver()
    with pytest.raises((urllib.error.URLError, OSError)):
        kube.request("GET", "/version", timeout=5.0)

    kube.start_apiserver()
    assert kube.url == url_before
    got = kube.kubectl("-n", namespace, "get", "configmap", "survivor", "-o", "json")
    assert got.returncode == 0, got.stderr
    cm = _json(got.stdout)
    assert cm["data"] == {"k": "v"}
    assert cm["metadata"]["uid"] == before["uid"]
    assert cm["metadata"]["resourceVersion"] == before["resourceVersion"]

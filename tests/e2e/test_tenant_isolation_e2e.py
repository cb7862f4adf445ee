"""Tenant isolation against a real kube-apiserver (issue 11, items 1 and 2; THREAT_MODEL.md).

The controller runs as ``config/`` deploys it — the ServiceAccount and least-privilege ClusterRole of
``config/rbac`` (which may read every Secret, for Providers' and Receivers' credentials) — with
``--no-cross-namespace-refs``. Tenant A owns a Receiver and an Alert; tenant B owns a GitRepository and a
Secret created with ``kubectl apply`` (so its ``last-applied-configuration`` annotation holds the
plaintext). Before the fix, hostile apiVersions (``?``, ``#``, ``..``, ``%2F``) in A's Receiver annotated
B's GitRepository, a CEL ``resourceFilter`` read B's Secret one guess at a time through the 200/500
answer, and an unauthenticated event made the controller read B's Secret to match labels.
"""

from __future__ import annotations

import functools
import hashlib
import json
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import (
    NS,
    Controller,
    ThreadedSink,
    apply,
    get,
    post_event,
    ready,
    wait_for,
)

pytestmark = pytest.mark.e2e
GIT = "source.toolkit.fluxcd.io/v1"
TOKEN = "tenant-a-receiver-token"
PASSWORD = "tenant-b-plaintext-password"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"


def hostile(b: str) -> dict[str, list[str]]:
    """Hostile apiVersions aimed at tenant B's namespace ``b``, by what they try to reach."""
    return {
        "victim": [
            f"{GIT}/namespaces/{b}/gitrepositories/victim?",
            f"{GIT}/namespaces/{b}/gitrepositories/victim#",
            f"{GIT}/../v1/namespaces/{b}/gitrepositories/victim?",
            f"{GIT}%2Fnamespaces%2F{b}%2Fgitrepositories%2Fvictim?",
        ],
        "secret": [
            f"{GIT}/../../../api/v1/namespaces/{b}/secrets/creds?",
            f"{GIT}/../../../api/v1/namespaces/{b}/secrets/creds#",
            f"/v1/namespaces/{b}/secrets/creds?",
        ],
    }


@pytest.fixture(scope="module")
def controller(installed: KubeTestServer) -> Iterator[Controller]:
    kubeconfig = installed.create_service_account_kubeconfig(NS, "notification-controller")
    ctl = Controller(installed, kubeconfig, "--no-cross-namespace-refs", name="isolation")
    try:
        ctl.wait_ready()
        yield ctl
    finally:
        code = ctl.stop()
        assert code == 0, ctl.log()[-3000:]


@pytest.fixture
def tenant_b(installed: KubeTestServer) -> Iterator[str]:
    """Tenant B: a GitRepository and a Secret applied with kubectl (plaintext in last-applied)."""
    name = f"e2e-tenant-b-{uuid.uuid4().hex[:6]}"
    installed.kubectl("create", "namespace", name, check=True)
    apply(
        installed,
        textwrap.dedent(
            f"""\
            apiVersion: {GIT}
            kind: GitRepository
            metadata: {{name: victim, namespace: {name}, labels: {{team: a}}}}
            spec: {{url: https://example.com/victim}}
            ---
            apiVersion: v1
            kind: Secret
            metadata: {{name: creds, namespace: {name}, labels: {{team: a}}}}
            stringData: {{password: {PASSWORD}}}
            """
        ),
    )
    secret = get(installed, "secret", name, "creds") or {}
    assert PASSWORD in secret["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    yield name
    installed.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def _receiver(namespace: str, name: str, resources: list[dict[str, Any]], resource_filter: str = "") -> str:
    spec: dict[str, Any] = {"type": "generic", "secretRef": {"name": "token"}, "resources": resources}
    if resource_filter:
        spec["resourceFilter"] = resource_filter
    doc = {
        "apiVersion": "notification.toolkit.fluxcd.io/v1",
        "kind": "Receiver",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return "---\n" + json.dumps(doc) + "\n"


def _post(controller: Controller, namespace: str, name: str) -> int:
    path = "/hook/" + hashlib.sha256(f"{TOKEN}{name}{namespace}".encode()).hexdigest()
    request = urllib.request.Request(
        controller.url("receiver", path),
        data=b"{}",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _annotations(kube: KubeTestServer, kind: str, namespace: str, name: str) -> dict[str, str]:
    obj = get(kube, kind, namespace, name) or {}
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _serve(installed: KubeTestServer, controller: Controller, namespace: str, names: list[str]) -> None:
    def receiver_ready(name: str) -> bool:
        return (ready(get(installed, "receiver", namespace, name)) or ("",))[0] == "True"

    for name in names:
        wait_for(functools.partial(receiver_ready, name), what=f"receiver {name} ready")
        wait_for(
            functools.partial(lambda n: _post(controller, namespace, n) != 404, name),
            what=f"hook {name} served",
        )


def test_a_tenants_receiver_cannot_reach_another_namespace_or_a_secret(
    installed: KubeTestServer, controller: Controller, namespace: str, tenant_b: str
) -> None:
    """Item 1: every hostile apiVersion is answered 500 (like a missing object) and touches nothing in B;
    the resourceFilter oracle gives the same answer for a right and a wrong guess."""
    attacks = hostile(tenant_b)
    guess = "res.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration'].contains('%s')"
    manifest = textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Secret
        metadata: {{name: token, namespace: {namespace}}}
        stringData: {{token: {TOKEN}}}
        ---
        apiVersion: {GIT}
        kind: GitRepository
        metadata: {{name: app, namespace: {namespace}, labels: {{team: a}}}}
        spec: {{url: https://example.com/app}}
        """
    )
    receivers: dict[str, list[dict[str, Any]]] = {
        f"cross-{i}": [{"apiVersion": v, "kind": "GitRepository", "name": "app"}]
        for i, v in enumerate(attacks["victim"])
    }
    receivers["list-all"] = [
        {
            "apiVersion": f"{GIT}/gitrepositories?",
            "kind": "GitRepository",
            "name": "*",
            "matchLabels": {"team": "a"},
        }
    ]
    receivers["missing"] = [{"apiVersion": GIT, "kind": "GitRepository", "name": "no-such-repo"}]
    for i, v in enumerate(attacks["secret"]):
        receivers[f"right-{i}"] = [{"apiVersion": v, "kind": "GitRepository", "name": "app"}]
        receivers[f"wrong-{i}"] = [{"apiVersion": v, "kind": "GitRepository", "name": "app"}]
    filters = {n: guess % (PASSWORD if n.startswith("right") else "not-the-password") for n in receivers}
    filters.update({n: "" for n in receivers if not n.startswith(("right", "wrong"))})
    apply(
        installed,
        manifest + "".join(_receiver(namespace, n, r, filters[n]) for n, r in receivers.items()),
    )
    secret_before = get(installed, "secret", tenant_b, "creds") or {}
    _serve(installed, controller, namespace, list(receivers))

    answers = {name: _post(controller, namespace, name) for name in receivers}
    assert set(answers.values()) == {500}, answers  # right guess, wrong guess, missing: one answer
    assert REQUESTED_AT not in _annotations(
        installed, "gitrepositories.source.toolkit.fluxcd.io", tenant_b, "victim"
    )
    secret_after = get(installed, "secret", tenant_b, "creds") or {}
    assert secret_after["metadata"]["resourceVersion"] == secret_before["metadata"]["resourceVersion"]
    log = controller.log()
    assert PASSWORD not in log
    assert "Traceback" not in log

    # control: the same tenant, an honest reference, the same controller
    apply(
        installed,
        _receiver(namespace, "honest", [{"apiVersion": GIT, "kind": "GitRepository", "name": "app"}]),
    )
    _serve(installed, controller, namespace, ["honest"])
    assert _post(controller, namespace, "honest") == 200
    assert REQUESTED_AT in _annotations(
        installed, "gitrepositories.source.toolkit.fluxcd.io", namespace, "app"
    )


def test_an_unauthenticated_event_cannot_make_the_controller_read_another_namespace(
    installed: KubeTestServer, controller: Controller, namespace: str, tenant_b: str
) -> None:
    """Item 2: an Alert of tenant A matches ``team: a`` labels. Events naming A's GitRepository with an
    apiVersion aimed at B's Secret (labelled ``team: a``) are not delivered — the lookup never reached
    the Secret; an honest event is."""
    sink = ThreadedSink()
    try:
        apply(
            installed,
            textwrap.dedent(
                f"""\
                apiVersion: {GIT}
                kind: GitRepository
                metadata: {{name: app, namespace: {namespace}, labels: {{team: a}}}}
                spec: {{url: https://example.com/app}}
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Provider
                metadata: {{name: sink, namespace: {namespace}}}
                spec: {{type: generic, address: "{sink.url}/a"}}
                ---
                apiVersion: notification.toolkit.fluxcd.io/v1beta3
                kind: Alert
                metadata: {{name: team-a, namespace: {namespace}}}
                spec:
                  providerRef: {{name: sink}}
                  eventSources: [{{kind: GitRepository, name: '*', matchLabels: {{team: a}}}}]
                """
            ),
        )
        wait_for(
            lambda: (ready(get(installed, "alert", namespace, "team-a")) or ("",))[0] == "True", what="alert"
        )
        attacks = hostile(tenant_b)["secret"] + hostile(tenant_b)["victim"]
        for index, api_version in enumerate([*attacks, GIT]):
            event = {
                "involvedObject": {
                    "kind": "GitRepository",
                    "namespace": namespace,
                    "name": "app",
                    "apiVersion": api_version,
                },
                "severity": "info",
                "timestamp": "2026-11-22T10:00:00Z",
                "message": f"probe {index}",
                "reason": "Probe",
                "reportingController": "source-controller",
            }
            assert post_event(controller, event) == 202
        honest = f"probe {len(attacks)}"
        wait_for(lambda: honest in sink.messages(), what="the honest event delivered")
        time.sleep(1.0)  # the hostile lookups ran before the honest one; give stragglers a moment
        assert sink.messages() == [honest]
        assert PASSWORD not in controller.log()
    finally:
        sink.close()

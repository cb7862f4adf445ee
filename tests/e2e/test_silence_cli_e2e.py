"""``notification-controller silence add|list|expire --kubeconfig`` against a real kube-apiserver (issue 26
item 2): the Silence the command creates is one the generated CRD's schema takes, ``expire`` is a merge
patch the server applies, a Silence Flux applies is refused, and mistakes come back as one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.apiserver import ADMIN_USER, KubeTestServer
from tests.e2e.controllerkit import apply

pytestmark = pytest.mark.e2e

SCRIPT = Path(sys.executable).parent / "notification-controller"


def _silence(kube: KubeTestServer, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "silence", *argv, "--kubeconfig", str(kube.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _ok(kube: KubeTestServer, *argv: str) -> str:
    done = _silence(kube, *argv)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    return done.stdout


def _get(kube: KubeTestServer, namespace: str, name: str) -> dict[str, Any]:
    done = kube.kubectl(
        "get", "silences.notification-controller.io", name, "-n", namespace, "-o", "json", check=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_add_list_expire_through_the_api_server(installed: KubeTestServer, namespace: str) -> None:
    created = json.loads(
        _ok(
            installed,
            "add",
            "--match",
            "kind=Kustomization",
            "--match",
            "name=~apps-.*",
            "--for",
            "2h",
            "--comment",
            "deploy freeze",
            "-n",
            namespace,
            "-o",
            "json",
        )
    )
    name = created["metadata"]["name"]
    assert created["metadata"]["uid"] and created["metadata"]["creationTimestamp"]  # the server's answer
    stored = _get(installed, namespace, name)
    assert stored["metadata"]["annotations"]["notification-controller.io/created-by-cli"] == "true"
    spec = stored["spec"]
    assert spec["createdBy"] == ADMIN_USER  # the kubeconfig's user
    assert spec["comment"] == "deploy freeze"
    assert [(m["name"], m["matchType"], m["value"]) for m in spec["matchers"]] == [
        ("kind", "=", "Kustomization"),
        ("name", "=~", "apps-.*"),
    ]

    table = _ok(installed, "list", "-n", namespace).splitlines()
    assert table[0].split()[:5] == ["NAME", "STATE", "MATCHERS", "ENDS", "HELD"]
    assert table[1].split()[:4] == [name, "Active", "kind=Kustomization", "name=~apps-.*"]
    rows = json.loads(_ok(installed, "list", "-n", namespace, "-o", "json"))
    assert [(r["name"], r["state"], r["endsAt"]) for r in rows] == [(name, "Active", spec["endsAt"])]
    everywhere = json.loads(_ok(installed, "list", "-A", "-o", "json"))
    assert (namespace, name) in {(r["namespace"], r["name"]) for r in everywhere}

    said = _ok(installed, "expire", name, "-n", namespace)
    assert said.startswith(f"silence {namespace}/{name} expired at ")
    ended = _get(installed, namespace, name)
    assert ended["spec"]["endsAt"] < spec["endsAt"] and ended["spec"]["matchers"] == spec["matchers"]
    assert int(ended["metadata"]["generation"]) == int(stored["metadata"]["generation"]) + 1
    assert _ok(installed, "list", "-n", namespace).startswith("no active or pending silences")
    rows = json.loads(_ok(installed, "list", "-n", namespace, "--expired", "-o", "json"))
    assert [(r["name"], r["state"]) for r in rows] == [(name, "Expired")]
    again = _ok(installed, "expire", name, "-n", namespace)
    assert "had already ended" in again and _get(installed, namespace, name)["spec"] == ended["spec"]


def test_refusals_and_mistakes_are_one_line(installed: KubeTestServer, namespace: str) -> None:
    apply(
        installed,
        textwrap.dedent(
            f"""\
            apiVersion: notification-controller.io/v1alpha1
            kind: Silence
            metadata:
              name: from-git
              namespace: {namespace}
              labels: {{kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}}
            spec:
              matchers: [{{name: kind, value: Kustomization, matchType: =}}]
              duration: 2h
            """
        ),
    )
    before = _get(installed, namespace, "from-git")
    for argv, code, says in (
        (
            ["expire", "from-git", "-n", namespace],
            1,
            "is applied by Flux (kustomize.toolkit.fluxcd.io/name=apps)",
        ),
        (["expire", "nothing", "-n", namespace], 1, f"Silence {namespace}/nothing not found"),
        (
            ["add", "--match", "kind=x", "--for", "1h", "--name", "from-git", "-n", namespace],
            1,
            f"Silence {namespace}/from-git already exists",
        ),
        (["add", "--match", "kind=x", "--for", "1h", "-n", "no-such-namespace-e2e"], 1, "namespace 'no-such"),
        (["add", "--match", "kind=~(", "--for", "1h", "-n", namespace], 2, "not an RE2 expression"),
    ):
        done = _silence(installed, *argv)
        assert done.returncode == code, (argv, done.stderr)
        assert done.stderr.startswith("error: ") and says in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert (
        _get(installed, namespace, "from-git")["metadata"]["resourceVersion"]
        == before["metadata"]["resourceVersion"]
    )
    # a duration-only Silence made elsewhere: its window counts from the server's creation time
    rows = json.loads(_ok(installed, "list", "-n", namespace, "-o", "json"))
    assert [(r["name"], r["state"]) for r in rows] == [("from-git", "Active")]

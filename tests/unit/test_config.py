"""The kustomize tree in ``config/`` renders a least-privilege, non-root install (reference §7).

``kubectl kustomize config/default`` is the install users run; the checks below read what it renders.
Where kubectl is missing the same objects are loaded by a ten-line resolver of the tree, and
``test_kubectl_renders_the_same_objects`` proves the two agree wherever kubectl exists.
"""

from __future__ import annotations

import copy
import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from notification_controller.api import GROUP
from notification_controller.api.common import SourceKind
from notification_controller.objects.yamldoc import BaseLoader as KubeYAML  # kustomize writes `=` plain

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config"
NAMESPACE = "flux-system"
SERVICE_ACCOUNT = "notification-controller"
_CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace"}
_KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None)

Obj = dict[str, Any]


def _resolve(directory: Path) -> list[Obj]:
    """The resources of a kustomization, recursively, without transformers (``resources``, ``namespace`` and
    ``labels`` without selectors only)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "namespace", "labels"}, (
        f"{directory}: the fallback resolver only understands resources, namespace and labels"
    )
    objects: list[Obj] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            objects.extend(_resolve(path))
        else:
            objects.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    for label in kustomization.get("labels", []):
        assert set(label) <= {"pairs", "includeTemplates"}, f"{directory}: labels on selectors"
        for obj in objects:
            obj["metadata"].setdefault("labels", {}).update(label["pairs"])
            if label.get("includeTemplates") and obj["kind"] == "Deployment":
                obj["spec"]["template"]["metadata"].setdefault("labels", {}).update(label["pairs"])
    namespace = kustomization.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] not in _CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace
            for subject in obj.get("subjects", []):
                if subject["kind"] == "ServiceAccount":
                    subject["namespace"] = namespace
    return objects


@functools.cache
def _kubectl_render() -> tuple[Obj, ...]:
    assert _KUBECTL is not None
    result = subprocess.run(
        [_KUBECTL, "kustomize", str(CONFIG / "default")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.load_all(result.stdout, Loader=KubeYAML) if d)


def _rendered() -> list[Obj]:
    """``config/default`` rendered by kubectl when available, else by the fallback resolver."""
    if _KUBECTL is not None:
        return list(_kubectl_render())
    return _resolve(CONFIG / "default")


def _one(kind: str, name: str | None = None) -> Obj:
    matches = [
        o for o in _rendered() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, got {len(matches)}"
    return matches[0]


def _key(obj: Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


@pytest.mark.skipif(_KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_renders_the_same_objects() -> None:
    rendered = sorted(_kubectl_render(), key=_key)
    assert rendered == sorted(_resolve(CONFIG / "default"), key=_key)


def test_inventory() -> None:
    assert sorted(_key(o) for o in _rendered()) == [
        ("ClusterRole", "notification-controller"),
        ("ClusterRoleBinding", "notification-controller"),
        ("CustomResourceDefinition", f"alerts.{GROUP}"),
        ("CustomResourceDefinition", f"providers.{GROUP}"),
        ("CustomResourceDefinition", f"receivers.{GROUP}"),
        ("CustomResourceDefinition", "silences.notification-controller.io"),
        ("Deployment", "notification-controller"),
        ("NetworkPolicy", "notification-controller"),
        ("Role", "notification-controller-leader-election"),
        ("RoleBinding", "notification-controller-leader-election"),
        ("Service", "notification-controller"),
        ("Service", "webhook-receiver"),
        ("ServiceAccount", SERVICE_ACCOUNT),
    ]
    for obj in _rendered():
        if obj["kind"] in _CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], _key(obj)
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, _key(obj)


def test_crds_are_the_generated_ones() -> None:
    """config/crd points at crds/ (the generated source of truth), so the install cannot drift from it."""
    for group, plural in [(GROUP, p) for p in ("alerts", "providers", "receivers")] + [
        ("notification-controller.io", "silences")
    ]:
        checked_in = yaml.safe_load((REPO / "crds" / f"{group}_{plural}.yaml").read_text(encoding="utf-8"))
        installed = copy.deepcopy(_one("CustomResourceDefinition", f"{plural}.{group}"))
        assert installed["metadata"].pop("labels") == FLUX_LABELS  # config/default adds Flux's labels only
        assert installed == checked_in


# Flux's labels (gotk-components.yaml) on every object: `flux check`, `flux logs` and `flux uninstall` select them.
FLUX_LABELS = {
    "app.kubernetes.io/part-of": "flux",
    "app.kubernetes.io/instance": "flux-system",
    "app.kubernetes.io/component": "notification-controller",
}


def test_every_object_and_the_pod_template_carry_fluxs_labels() -> None:
    for obj in _rendered():
        labels = obj["metadata"].get("labels", {})
        assert FLUX_LABELS.items() <= labels.items(), _key(obj)
    deployment = _one("Deployment")
    assert FLUX_LABELS.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert deployment["metadata"]["labels"]["control-plane"] == "controller"
    # The selector stays Flux's: an apply over Flux's Deployment must not change it (immutable).
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "notification-controller"}}


# ------------------------------------------------------------------------------------------ Deployment


def _container() -> Obj:
    (container,) = _one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def test_deployment_runs_non_root_read_only() -> None:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65534
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = _container()["securityContext"]
    assert ctx["runAsNonRoot"] is True
    assert ctx["runAsUser"] == 65534
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in ctx or ctx["privileged"] is False
    # A read-only root needs a writable /tmp.
    assert {"name": "temp", "mountPath": "/tmp"} in _container()["volumeMounts"]
    assert {"name": "temp", "emptyDir": {}} in pod["volumes"]
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod.get("hostNetwork", False) is False


def test_deployment_matches_fluxs_contract() -> None:
    """Reference §7: args, ports, RUNTIME_NAMESPACE, probes on healthz."""
    container = _container()
    assert container["image"] == "notification-controller:latest"
    assert container["args"] == [
        "--watch-all-namespaces",
        "--log-level=info",
        "--log-encoding=json",
        "--enable-leader-election",
    ]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 9090,
        "http-webhook": 9292,
        "http-prom": 8080,
        "healthz": 9440,
    }
    assert {
        "name": "RUNTIME_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    } in container["env"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz"}
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "1000m", "memory": "1Gi"},
    }


def test_services_reach_the_named_ports() -> None:
    """The Service names other Flux controllers and webhooks already use."""
    deployment = _one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"] for p in _container()["ports"]}
    for name, target in (("notification-controller", "http"), ("webhook-receiver", "http-webhook")):
        service = _one("Service", name)["spec"]
        assert service["selector"].items() <= pod_labels.items()
        assert [(p["port"], p["targetPort"]) for p in service["ports"]] == [(80, target)]
        assert target in ports


# ------------------------------------------------------------------------------------------ RBAC

_READ_PATCH = {"get", "list", "watch", "patch"}
_TOOLKIT = {
    # group -> resources the Receiver annotates and Alert matchLabels read (reference §3.5, §5.4)
    "source.toolkit.fluxcd.io": {
        "buckets",
        "gitrepositories",
        "helmcharts",
        "helmrepositories",
        "ocirepositories",
        "externalartifacts",
    },
    "source.extensions.fluxcd.io": {"artifactgenerators"},
    "image.toolkit.fluxcd.io": {"imagerepositories", "imagepolicies", "imageupdateautomations"},
    "kustomize.toolkit.fluxcd.io": {"kustomizations"},
    "helm.toolkit.fluxcd.io": {"helmreleases"},
}
_OURS = ("alerts", "providers", "receivers")

CLUSTER_ROLE_ALLOW_LIST: set[tuple[str, str, str]] = {
    *((GROUP, r, v) for r in _OURS for v in ("get", "list", "watch", "update", "patch")),
    *((GROUP, f"{r}/status", v) for r in _OURS for v in ("get", "patch", "update")),
    *((GROUP, f"{r}/finalizers", "update") for r in _OURS),
    *(("", "secrets", v) for v in ("get", "list", "watch")),
    *((g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")),
    *((g, r, v) for g, resources in _TOOLKIT.items() for r in resources for v in _READ_PATCH),
    *(("notification-controller.io", "silences", v) for v in ("get", "list", "watch", "delete")),
    ("notification-controller.io", "silences/status", "patch"),  # status only; delete: --silence-retention
    ("", "services", "get"),
    ("", "serviceaccounts", "get"),  # workload identity: the ServiceAccount's cloud annotations
    ("", "serviceaccounts/token", "create"),  # workload identity: TokenRequest
}
"""(apiGroup, resource, verb) the ClusterRole grants: exactly these, nothing more, nothing less."""

LEADER_ELECTION_ALLOW_LIST: set[tuple[str, str, str]] = {
    *(("coordination.k8s.io", "leases", v) for v in ("get", "list", "watch", "create", "update", "patch")),
    *(("", "events", v) for v in ("create", "patch")),
}


def _grants(role: Obj) -> set[tuple[str, str, str]]:
    grants: set[tuple[str, str, str]] = set()
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"unexpected rule keys: {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    grants.add((group, resource, verb))
    return grants


def test_cluster_role_grants_exactly_the_allow_list() -> None:
    grants = _grants(_one("ClusterRole", "notification-controller"))
    assert grants - CLUSTER_ROLE_ALLOW_LIST == set(), "ClusterRole grants more than the allow-list"
    assert CLUSTER_ROLE_ALLOW_LIST - grants == set(), "ClusterRole misses permissions the controller needs"


def test_cluster_role_check_catches_extras() -> None:
    """The allow-list comparison fails on an extra verb, an extra resource, and on wildcards."""
    role = _one("ClusterRole", "notification-controller")
    extra_verb = {
        "rules": [*role["rules"], {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    }
    assert _grants(extra_verb) - CLUSTER_ROLE_ALLOW_LIST == {("", "secrets", "create")}
    wildcard = {"rules": [{"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["get"]}]}
    with pytest.raises(AssertionError, match="wildcard"):
        _grants(wildcard)
    named = {
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["x"]}]
    }
    with pytest.raises(AssertionError, match="unexpected rule keys"):
        _grants(named)


def test_every_source_kind_can_be_annotated() -> None:
    """Each kind a Receiver may target (the CRD enum) is covered by the toolkit grants."""
    plurals = {
        SourceKind.BUCKET: "buckets",
        SourceKind.GIT_REPOSITORY: "gitrepositories",
        SourceKind.KUSTOMIZATION: "kustomizations",
        SourceKind.HELM_RELEASE: "helmreleases",
        SourceKind.HELM_CHART: "helmcharts",
        SourceKind.HELM_REPOSITORY: "helmrepositories",
        SourceKind.IMAGE_REPOSITORY: "imagerepositories",
        SourceKind.IMAGE_POLICY: "imagepolicies",
        SourceKind.IMAGE_UPDATE_AUTOMATION: "imageupdateautomations",
        SourceKind.OCI_REPOSITORY: "ocirepositories",
        SourceKind.ARTIFACT_GENERATOR: "artifactgenerators",
        SourceKind.EXTERNAL_ARTIFACT: "externalartifacts",
    }
    assert set(plurals) == set(SourceKind), "a new SourceKind needs an RBAC grant"
    assert set(plurals.values()) == {r for resources in _TOOLKIT.values() for r in resources}
    grants = _grants(_one("ClusterRole", "notification-controller"))
    for group, resources in _TOOLKIT.items():
        for resource in resources:
            assert {(group, resource, v) for v in _READ_PATCH} <= grants


def test_leader_election_role_is_namespaced_and_minimal() -> None:
    role = _one("Role", "notification-controller-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _grants(role) == LEADER_ELECTION_ALLOW_LIST


def test_bindings_name_the_service_account() -> None:
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    cluster_binding = _one("ClusterRoleBinding", "notification-controller")
    assert cluster_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "notification-controller",
    }
    assert cluster_binding["subjects"] == [subject]
    binding = _one("RoleBinding", "notification-controller-leader-election")
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["roleRef"]["name"] == "notification-controller-leader-election"
    assert binding["subjects"] == [subject]


# ------------------------------------------------------------------------------------------ NetworkPolicy


def test_network_policy() -> None:
    """9090 from this namespace's pods only, 9292 from anywhere, 8080 from the monitoring namespace."""
    policy = _one("NetworkPolicy", "notification-controller")["spec"]
    pod_labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    rules = {tuple(p["port"] for p in rule["ports"]): rule.get("from") for rule in policy["ingress"]}
    assert rules == {
        (9090,): [{"podSelector": {}}],
        (9292,): None,
        (8080,): [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
    }
    assert all(p["protocol"] == "TCP" for rule in policy["ingress"] for p in rule["ports"])


# ------------------------------------------------------------------------------------------ CLI contract


def test_deployment_args_parse_with_the_cli() -> None:
    """The manifest and the CLI agree: the args parse, and the default listen ports are the container ports."""
    from notification_controller.cli import parse_args

    container = _container()
    settings = parse_args(container["args"], environ={"RUNTIME_NAMESPACE": NAMESPACE})
    assert settings.kube.watch_all_namespaces is True
    assert settings.leader.enabled is True
    assert (settings.log.level, settings.log.encoding) == ("info", "json")
    assert settings.kube.runtime_namespace == NAMESPACE
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    server = settings.server
    assert {
        "http": server.events_addr,
        "http-webhook": server.receiver_addr,
        "http-prom": server.metrics_addr,
        "healthz": server.health_addr,
    } == {name: f":{port}" for name, port in ports.items()}
    grace = _one("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert server.shutdown_grace < grace, "deliveries must drain before the kubelet kills the pod"

"""What the benchmarks feed the controller: manifests (written to a temp dir) and event bodies.

Every event body is distinct (its message carries the request index), so the duplicate limiter
(reference §3.3) never answers 429 and every 202 is a real ingest. Events a sink should receive carry
``event.toolkit.fluxcd.io/sent_ns`` (send time) and ``event.toolkit.fluxcd.io/phase``; the controller
forwards them prefix-stripped in the notification's metadata (reference §3.6), where ``bench.sink``
reads them.

Throughput is measured with ``wrk`` (``bench/wrk.py``), which sends request *templates*: the same
bodies with the marker ``@@N@@`` where the request number goes (``*_templates`` below); the Python
open-loop generator (latency, burst) calls the ``*_events`` factories with the number itself.

The configuration-scale layout (``scale_plan``) spreads N Alerts over 100 namespaces with a seeded RNG:
one generic Provider per namespace (all pointing at the sink), ~5% wildcard sources (kept to health
checks by an inclusion list), two named sources otherwise, RE2 inclusion and/or exclusion lists on
three Alerts out of four, a few ``error``-only Alerts. Half of the events are aimed at one Alert (built
to pass its sources and filters), half are random (their sources hit wildcards, whose inclusion list
then rejects them), so an event matches ~0.5 Alerts on average whatever N is: the benchmark measures
the cost of *finding* the matches among N Alerts, not the cost of delivering more notifications.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from .load import BodyFactory, HeadersFactory
from .wrk import MARKER

TEMPLATES = 1000  # distinct bodies per wrk run (the request number makes each request distinct)

NAMESPACES = tuple(f"team-{i:02d}" for i in range(100))
KIND_API = {
    "Kustomization": "kustomize.toolkit.fluxcd.io/v1",
    "HelmRelease": "helm.toolkit.fluxcd.io/v2",
    "GitRepository": "source.toolkit.fluxcd.io/v1",
    "HelmRepository": "source.toolkit.fluxcd.io/v1",
    "HelmChart": "source.toolkit.fluxcd.io/v1",
    "OCIRepository": "source.toolkit.fluxcd.io/v1beta2",
    "Bucket": "source.toolkit.fluxcd.io/v1",
    "ImageRepository": "image.toolkit.fluxcd.io/v1beta2",
    "ImagePolicy": "image.toolkit.fluxcd.io/v1beta2",
    "ImageUpdateAutomation": "image.toolkit.fluxcd.io/v1beta2",
}
KINDS = tuple(KIND_API)
EVENT_PREFIX = "event.toolkit.fluxcd.io/"
INCLUSION: tuple[str, ...] = (
    r"^(Reconciliation|Health check) (finished|passed)",
    r"revision main@sha1:[0-9a-f]{40}",
)
WILDCARD_INCLUSION: tuple[str, ...] = (r"^Health check passed",)
EXCLUSION: tuple[str, ...] = (r"(?i)dependency '[^']+' is not ready", r"^skip-\d+$", r"\bdry-run\b")

try:
    _Dumper: Any = yaml.CSafeDumper
except AttributeError:  # PyYAML without libyaml
    _Dumper = yaml.SafeDumper


# ---- building blocks --------------------------------------------------------------------------------
def event_body(
    kind: str,
    namespace: str,
    name: str,
    message: str,
    *,
    severity: str = "info",
    metadata: Mapping[str, str] | None = None,
    index: int = 0,
) -> bytes:
    """A Flux event as the toolkit controllers send it (``fluxcd/pkg/runtime/events``)."""
    api_version = KIND_API[kind]
    group = api_version.split("/")[0]
    md = {f"{group}/revision": f"main@sha1:{index:040x}"}
    md.update(metadata or {})
    return orjson.dumps(
        {
            "involvedObject": {
                "kind": kind,
                "namespace": namespace,
                "name": name,
                "uid": f"00000000-0000-4000-8000-{index % 10**12:012d}",
                "apiVersion": api_version,
                "resourceVersion": str(1000 + index),
            },
            "severity": severity,
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "ReconciliationSucceeded",
            "metadata": md,
            "reportingController": f"{group.split('.')[0]}-controller",
            "reportingInstance": f"{group.split('.')[0]}-controller-7f5d9c7b8-x2x4k",
        }
    )


def tracked(phase: str) -> dict[str, str]:
    """Metadata that lets the sink attribute a delivery to a phase and measure its latency."""
    return {EVENT_PREFIX + "phase": phase, EVENT_PREFIX + "sent_ns": str(time.time_ns())}


def provider_doc(namespace: str, name: str, address: str) -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Provider",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "generic", "address": address, "timeout": "10s"},
    }


def alert_doc(
    namespace: str,
    name: str,
    provider: str,
    sources: Sequence[tuple[str, str]],
    *,
    severity: str = "info",
    inclusion: Sequence[str] = (),
    exclusion: Sequence[str] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "providerRef": {"name": provider},
        "eventSeverity": severity,
        "eventSources": [{"kind": kind, "name": src} for kind, src in sources],
    }
    if inclusion:
        spec["inclusionList"] = list(inclusion)
    if exclusion:
        spec["exclusionList"] = list(exclusion)
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Alert",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def write_manifests(directory: Path, files: Mapping[str, Sequence[dict[str, Any]]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for filename, docs in files.items():
        text = yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
        (directory / filename).write_text(text)
    return directory


# ---- 1. ingest without a matching Alert ---------------------------------------------------------------
NO_MATCH_ALERTS = 10


def no_match_manifests(directory: Path) -> Path:
    """One Provider and 10 Alerts that no benchmark event matches (other namespace, other kinds): the
    "ingest, 10 Alerts" figure of issue 29."""
    return write_manifests(
        directory,
        {
            "flux-system.yaml": [
                provider_doc("flux-system", "nowhere", "http://127.0.0.1:9/never"),
                *(
                    alert_doc("flux-system", f"apps-{i}", "nowhere", [(KINDS[i % 2], f"apps-{i}")])
                    for i in range(NO_MATCH_ALERTS)
                ),
            ]
        },
    )


def no_match_event(index: int, tag: str = "") -> bytes:
    return event_body(
        "GitRepository",
        NAMESPACES[index % len(NAMESPACES)],
        f"repo-{index % 50}",
        f"stored artifact for commit 'Merge pull request #{tag or index}' in revision main@sha1:{index:040x}",
        index=index,
    )


def no_match_templates(count: int = TEMPLATES) -> list[bytes]:
    return [no_match_event(i, MARKER) for i in range(count)]


# ---- 2 and 4. ingest + dispatch to one generic Provider -----------------------------------------------
DISPATCH_NAMESPACE = "apps"


def dispatch_manifests(directory: Path, sink_url: str) -> Path:
    return write_manifests(
        directory,
        {
            "apps.yaml": [
                provider_doc(DISPATCH_NAMESPACE, "sink", f"{sink_url}/flux"),
                alert_doc(DISPATCH_NAMESPACE, "all-kustomizations", "sink", [("Kustomization", "*")]),
            ]
        },
    )


def silence_doc(namespace: str, name: str) -> dict[str, Any]:
    """An active Silence (a year either side of now) whose matcher no benchmark event meets: every
    notification of its namespace is checked against it and goes on (the "new stages" row)."""
    return {
        "apiVersion": "notification-controller.io/v1alpha1",
        "kind": "Silence",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "matchers": [{"name": "name", "value": "no-such-object-.*", "matchType": "=~"}],
            "startsAt": "2025-01-01T00:00:00Z",
            "endsAt": "2099-01-01T00:00:00Z",
            "comment": "bench: matches nothing",
        },
    }


def dispatch_manifests_with_silence(directory: Path, sink_url: str) -> Path:
    """``dispatch_manifests`` plus a Silence that holds nothing."""
    dispatch_manifests(directory, sink_url)
    return write_manifests(directory, {"silence.yaml": [silence_doc(DISPATCH_NAMESPACE, "nothing")]})


def dispatch_event(index: int, phase: str, tag: str, metadata: Mapping[str, str]) -> bytes:
    return event_body(
        "Kustomization",
        DISPATCH_NAMESPACE,
        f"app-{index % 50}",
        f"{phase} #{tag}: Reconciliation finished in 1.2s, next run in 10m0s",
        metadata=metadata,
        index=index,
    )


def dispatch_events(phase: str) -> BodyFactory:
    """Events matching ``dispatch_manifests``' Alert, stamped with their send time."""

    def body(index: int) -> bytes:
        return dispatch_event(index, phase, str(index), tracked(phase))

    return body


def dispatch_templates(phase: str, count: int = TEMPLATES) -> list[bytes]:
    """For wrk: the phase but no send time (latency is measured by the open-loop generator)."""
    return [dispatch_event(i, phase, MARKER, {EVENT_PREFIX + "phase": phase}) for i in range(count)]


# ---- 3 and 6. configuration scale ---------------------------------------------------------------------
@dataclass(frozen=True)
class AlertPlan:
    namespace: str
    name: str
    severity: str
    sources: tuple[tuple[str, str], ...]
    inclusion: tuple[str, ...]
    exclusion: tuple[str, ...]


def scale_plan(count: int, seed: int = 42) -> list[AlertPlan]:
    rng = random.Random(seed)
    plan = []
    for i in range(count):
        namespace = NAMESPACES[i % len(NAMESPACES)]
        kind = rng.choice(KINDS)
        filters = rng.randrange(4)
        inclusion = INCLUSION if filters in (1, 3) else ()
        exclusion = EXCLUSION if filters in (2, 3) else ()
        if rng.random() < 0.05:
            # A wildcard watches every object of its kind; its inclusion list keeps it to health checks.
            sources: tuple[tuple[str, str], ...] = ((kind, "*"),)
            inclusion = WILDCARD_INCLUSION
        else:
            sources = ((kind, f"app-{i}"), (rng.choice(KINDS), f"app-{i}-canary"))
        plan.append(
            AlertPlan(
                namespace=namespace,
                name=f"alert-{i}",
                severity="error" if rng.random() < 0.05 else "info",
                sources=sources,
                inclusion=inclusion,
                exclusion=exclusion,
            )
        )
    return plan


def scale_manifests(directory: Path, plan: Sequence[AlertPlan], sink_url: str) -> Path:
    """One file per namespace: its Provider (to the sink) and its Alerts."""
    files: dict[str, list[dict[str, Any]]] = {
        f"{ns}.yaml": [provider_doc(ns, "sink", f"{sink_url}/{ns}")] for ns in NAMESPACES
    }
    for alert in plan:
        files[f"{alert.namespace}.yaml"].append(
            alert_doc(
                alert.namespace,
                alert.name,
                "sink",
                alert.sources,
                severity=alert.severity,
                inclusion=alert.inclusion,
                exclusion=alert.exclusion,
            )
        )
    return write_manifests(directory, files)


def scale_event(plan: Sequence[AlertPlan], index: int, tag: str, metadata: Mapping[str, str]) -> bytes:
    """Even indexes: aimed at one Alert (matches it); odd indexes: random (wildcards only)."""
    message = f"Reconciliation finished in {index % 997}ms, revision main@sha1:{index:040x} (run {tag})"
    if index % 2 == 0:
        alert = plan[(index // 2 * 7919) % len(plan)]
        kind, name = alert.sources[0]
        namespace = alert.namespace
        if name == "*":
            name = f"svc-{index % 50}"
            message = f"Health check passed in {index % 997}ms, revision main@sha1:{index:040x} (run {tag})"
        severity = alert.severity
    else:
        namespace = NAMESPACES[index % len(NAMESPACES)]
        kind = KINDS[(index // 7) % len(KINDS)]
        name = f"svc-{index % 50}"
        severity = "info"
    return event_body(kind, namespace, name, message, severity=severity, metadata=metadata, index=index)


def scale_events(plan: Sequence[AlertPlan], phase: str) -> BodyFactory:
    def body(index: int) -> bytes:
        return scale_event(plan, index, str(index), tracked(phase))

    return body


def scale_templates(plan: Sequence[AlertPlan], phase: str, count: int = 2 * TEMPLATES) -> list[bytes]:
    return [scale_event(plan, i, MARKER, {EVENT_PREFIX + "phase": phase}) for i in range(count)]


# ---- 5. receivers -------------------------------------------------------------------------------------
RECEIVER_NAMESPACE = "flux-system"
RECEIVER_NAME = "github-push"
RECEIVER_TOKEN = b"bench-receiver-token"


def receiver_path() -> str:
    """``/hook/`` + sha256(token + name + namespace), reference §5.1 (computed here independently)."""
    digest = hashlib.sha256(RECEIVER_TOKEN + RECEIVER_NAME.encode() + RECEIVER_NAMESPACE.encode())
    return "/hook/" + digest.hexdigest()


def receiver_manifests(directory: Path, *, prefill_status: bool = False) -> Path:
    """A github Receiver on ``push`` for one GitRepository.

    ``prefill_status`` writes ``status.webhookPath`` and ``Ready=True`` into the manifest, standing in
    for the Receiver reconciler (only for measuring the server before the reconciler is wired).
    """
    receiver: dict[str, Any] = {
        "apiVersion": "notification.toolkit.fluxcd.io/v1",
        "kind": "Receiver",
        "metadata": {"name": RECEIVER_NAME, "namespace": RECEIVER_NAMESPACE},
        "spec": {
            "type": "github",
            "events": ["ping", "push"],
            "secretRef": {"name": "receiver-token"},
            "resources": [
                {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "podinfo"}
            ],
        },
    }
    if prefill_status:
        receiver["status"] = {
            "webhookPath": receiver_path(),
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Succeeded",
                    "message": "Receiver initialized",
                    "lastTransitionTime": "2026-11-22T10:00:00Z",
                    "observedGeneration": 1,
                }
            ],
        }
    return write_manifests(
        directory,
        {
            "receiver.yaml": [
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "receiver-token", "namespace": RECEIVER_NAMESPACE},
                    "stringData": {"token": RECEIVER_TOKEN.decode()},
                },
                receiver,
                {
                    "apiVersion": "source.toolkit.fluxcd.io/v1",
                    "kind": "GitRepository",
                    "metadata": {"name": "podinfo", "namespace": RECEIVER_NAMESPACE},
                    "spec": {"interval": "5m", "url": "https://github.com/stefanprodan/podinfo"},
                },
            ]
        },
    )


def github_push_body() -> bytes:
    """A push payload of realistic size (~3 KB) and shape."""
    commits = [
        {
            "id": f"{c:040x}",
            "tree_id": f"{c + 1:040x}",
            "distinct": True,
            "message": f"Bump podinfo to 6.7.{c}\n\nSigned-off-by: Dev <dev@example.com>",
            "timestamp": "2026-11-22T10:00:00Z",
            "url": f"https://github.com/stefanprodan/podinfo/commit/{c:040x}",
            "author": {"name": "Dev", "email": "dev@example.com", "username": "dev"},
            "committer": {"name": "GitHub", "email": "noreply@github.com", "username": "web-flow"},
            "added": [],
            "removed": [],
            "modified": ["charts/podinfo/Chart.yaml", "kustomize/deployment.yaml"],
        }
        for c in range(3)
    ]
    return orjson.dumps(
        {
            "ref": "refs/heads/main",
            "before": "0" * 40,
            "after": f"{2:040x}",
            "created": False,
            "deleted": False,
            "forced": False,
            "compare": "https://github.com/stefanprodan/podinfo/compare/000000000000...000000000002",
            "commits": commits,
            "head_commit": commits[-1],
            "repository": {
                "id": 123456789,
                "name": "podinfo",
                "full_name": "stefanprodan/podinfo",
                "private": False,
                "owner": {"login": "stefanprodan", "id": 1234, "type": "User"},
                "html_url": "https://github.com/stefanprodan/podinfo",
                "default_branch": "main",
                "master_branch": "main",
            },
            "pusher": {"name": "dev", "email": "dev@example.com"},
            "sender": {"login": "dev", "id": 4321, "type": "User"},
        }
    )


def github_wrk_headers(body: bytes, *, valid: bool) -> list[str]:
    """``github_headers`` for wrk: the delivery id holds the marker (distinct per request)."""
    fixed = github_headers(body, valid=valid)(0, body)
    headers = [f"{name}: {value}" for name, value in fixed.items() if name != "X-GitHub-Delivery"]
    return [*headers, f"X-GitHub-Delivery: 72d3162e-cc78-11e3-81ab-{MARKER}"]


def github_headers(body: bytes, *, valid: bool) -> HeadersFactory:
    """Per-request headers: a distinct ``X-GitHub-Delivery`` (replay protection) and the signature."""
    key = RECEIVER_TOKEN if valid else b"not-the-token"
    signature = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()

    def headers(index: int, _body: bytes) -> Mapping[str, str]:
        return {
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": f"72d3162e-cc78-11e3-81ab-{index:012x}",
            "X-Hub-Signature-256": signature,
        }

    return headers

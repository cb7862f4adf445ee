"""A normal-sized cluster for the scale tests (issue 11 item 3): objects, listener probes, RSS from /proc.

Both scale tests (local mode in ``tests/adversarial/test_scale.py``, the real API server in
``tests/e2e/test_scale_e2e.py``) build the same population: ``SECRETS`` Secrets (a token and a webhook
address each; every fourth also a PEM-sized ``tls.key``, as TLS and SSH Secrets are), ``PROVIDERS``
Providers and ``RECEIVERS`` generic Receivers that reference the first of them, and ``ALERTS`` Alerts.

``ListenerProbes`` polls every listener from its own threads (one per listener, a fresh connection per
request, like a kubelet probe) and keeps every sample, so a test can assert that each listener answered
correctly and within a bound from the moment it was first up: a loop stalled by start-up work shows as a
timeout or a slow answer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SECRETS = 2_000
ALERTS = 2_000
RECEIVERS = 500
PROVIDERS = 500
CHURN = 200  # Secrets rotated while the listeners are probed (those of the first CHURN Receivers)

READY_BOUND = 20.0  # seconds from process start to /readyz 200 (measured: 1-4 s; old code: minutes)
RSS_BOUND = 400 * 1024 * 1024  # peak RSS (VmHWM) (measured: ~110-180 MB; old code: > 1 GB)
ANSWER_BOUND = 3.0  # seconds for any probe answer once its listener is up (measured: worst ~1 s, while the
# local-mode start-up parses the manifests on the loop; typically < 0.05 s. Old code: stalls of 10 s and more)

GROUP = "notification.toolkit.fluxcd.io"


def token(i: int, generation: int = 0) -> str:
    return hashlib.sha256(f"scale-token-{i}-{generation}".encode()).hexdigest()


def receiver_secret(i: int) -> int:
    """The Secret index of Receiver ``i`` (Providers use Secrets 0..PROVIDERS-1)."""
    return PROVIDERS + i


def secret(namespace: str, i: int, generation: int = 0) -> dict[str, Any]:
    tok = token(i, generation)
    data = {"token": tok, "address": f"https://hooks.example.com/services/T{i:05d}/B{i:05d}/{tok[:24]}"}
    if i % 4 == 3:
        body = base64.b64encode(hashlib.sha512(tok.encode()).digest() * 19).decode()
        lines = "\n".join(body[k : k + 64] for k in range(0, len(body), 64))
        data["tls.key"] = f"-----BEGIN PRIVATE KEY-----\n{lines}\n-----END PRIVATE KEY-----\n"
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"scale-secret-{i}", "namespace": namespace},
        "type": "Opaque",
        "stringData": data,
    }


def provider(namespace: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Provider",
        "metadata": {"name": f"scale-provider-{i}", "namespace": namespace},
        "spec": {"type": "generic", "secretRef": {"name": f"scale-secret-{i}"}},
    }


def alert(namespace: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta3",
        "kind": "Alert",
        "metadata": {"name": f"scale-alert-{i}", "namespace": namespace},
        "spec": {
            "providerRef": {"name": f"scale-provider-{i % PROVIDERS}"},
            "eventSources": [{"kind": "Kustomization", "name": f"app-{i}"}],
        },
    }


def receiver(namespace: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Receiver",
        "metadata": {"name": f"scale-receiver-{i}", "namespace": namespace},
        "spec": {
            "type": "generic",
            "secretRef": {"name": f"scale-secret-{receiver_secret(i)}"},
            "resources": [
                {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "podinfo"}
            ],
        },
    }


def population(namespace: str) -> list[dict[str, Any]]:
    """Every object of the scale tests, Secrets first (as an informer would see them)."""
    return [
        *(secret(namespace, i) for i in range(SECRETS)),
        *(provider(namespace, i) for i in range(PROVIDERS)),
        *(alert(namespace, i) for i in range(ALERTS)),
        *(receiver(namespace, i) for i in range(RECEIVERS)),
    ]


def hook_path(namespace: str, i: int, generation: int = 0) -> str:
    """Receiver ``i``'s webhook path with its Secret at ``generation`` (reference §5.1)."""
    raw = token(receiver_secret(i), generation).encode() + f"scale-receiver-{i}".encode() + namespace.encode()
    return "/hook/" + hashlib.sha256(raw).hexdigest()


def unmatched_event(n: int) -> bytes:
    """A valid event no Alert selects (accepted with 202; nothing to deliver), unique per ``n``."""
    return json.dumps(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": "probe",
                "name": "probe",
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            },
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": f"probe {n}",
            "reason": "ReconciliationSucceeded",
            "reportingController": "kustomize-controller",
        }
    ).encode()


def rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in bytes: current and peak resident set size."""
    values = {"VmRSS": 0, "VmHWM": 0}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in values:
                values[key] = int(rest.split()[0]) * 1024
    return values["VmRSS"], values["VmHWM"]


def http(method: str, url: str, body: bytes | None = None, timeout: float = ANSWER_BOUND + 1) -> int:
    """One request on a fresh connection; the status (0: no answer: refused, reset or timed out)."""
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        with exc:
            exc.read()
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


@dataclass
class Sample:
    at: float
    seconds: float
    status: int


@dataclass
class Probe:
    name: str
    request: Callable[[int], int]  # n -> status
    expect: int
    interval: float = 0.05
    samples: list[Sample] = field(default_factory=list)

    def since_up(self) -> list[Sample]:
        """Samples from the first expected answer on (before it, the listener was not bound yet)."""
        for index, sample in enumerate(self.samples):
            if sample.status == self.expect:
                return self.samples[index:]
        return []

    def bad(self, bound: float) -> list[Sample]:
        return [s for s in self.since_up() if s.status != self.expect or s.seconds > bound]

    def worst(self, since: float = 0.0) -> float:
        return max((s.seconds for s in self.since_up() if s.at >= since), default=0.0)


class ListenerProbes:
    """Polls the four listeners (events 202, receiver 404 on an unknown hook, metrics 200, health 200)."""

    def __init__(self, ports: dict[str, int]) -> None:
        base = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        self.probes = [
            Probe("health", lambda n: http("GET", base["health"] + "/healthz"), 200),
            # /metrics is megabytes with thousands of objects: scraped every second (Prometheus: 15-30 s)
            Probe("metrics", lambda n: http("GET", base["metrics"] + "/metrics"), 200, interval=1.0),
            Probe("events", lambda n: http("POST", base["events"] + "/", unmatched_event(n)), 202),
            Probe("receiver", lambda n: http("POST", base["receiver"] + "/hook/" + "0" * 64, b"{}"), 404),
        ]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in self.probes]

    def _run(self, probe: Probe) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            start = time.monotonic()
            status = probe.request(n)
            probe.samples.append(Sample(start, time.monotonic() - start, status))
            self._stop.wait(probe.interval)

    def __enter__(self) -> ListenerProbes:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(ANSWER_BOUND + 5)

    def mark(self) -> float:
        return time.monotonic()

    def keep_probing(
        self, *, since: float, minimum: int = 2, at_least: float = 2.5, timeout: float = 20.0
    ) -> None:
        """Keep probing for ``at_least`` seconds and until every listener has been asked ``minimum`` times
        since ``since`` (the slow /metrics probe may need longer), at most ``timeout`` seconds."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            enough = all(len([s for s in p.samples if s.at >= since]) >= minimum for p in self.probes)
            if enough and time.monotonic() - start >= at_least:
                return
            time.sleep(0.1)

    def assert_answering(self, bound: float = ANSWER_BOUND, *, since: float = 0.0, minimum: int = 2) -> None:
        """Every listener answered as expected and within ``bound`` seconds, from when it was first up
        (and at least ``minimum`` times after ``since``)."""
        problems = []
        for probe in self.probes:
            up = probe.since_up()
            recent = [s for s in up if s.at >= since]
            if len(recent) < minimum:
                problems.append(
                    f"{probe.name}: {len(recent)} answers since the mark (of {len(probe.samples)})"
                )
            bad = probe.bad(bound)
            if bad:
                shown = ", ".join(f"{s.status} in {s.seconds:.2f}s" for s in bad[:5])
                problems.append(
                    f"{probe.name}: {len(bad)} of {len(up)} answers wrong or slower than {bound}s: {shown}"
                )
        assert not problems, "; ".join(problems)

    def summary(self, since: float = 0.0) -> str:
        return ", ".join(
            f"{p.name} {len([s for s in p.since_up() if s.at >= since])} answers, worst {p.worst(since) * 1000:.0f} ms"
            for p in self.probes
        )

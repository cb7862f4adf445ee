"""Issue 11 item 4 on a real API server: an event burst against label-selected Alerts.

The attack: anyone who can POST events sends ~3,000 of them in a second or two for objects watched by
an Alert with ``eventSources[].matchLabels``. Each event needs the involved object's labels; fetched
uncached through the client's one token bucket (50 QPS, burst 300), the GETs queued for about a minute,
the Lease renewal waited behind them (leader lost, process exited), receivers answered 500 and the
notifications whose lookup failed were counted nowhere.

Here the controller leads with short Lease timings (renew deadline 3 s, so a starved renewal shows within
seconds), one Alert selects Kustomizations by label, and a generic Receiver is polled throughout. The
test asserts that the Lease stays held and keeps being renewed, the process stays up, every webhook
answers 2xx, the label lookups cost a handful of API GETs (counted by the API server itself), and every
expected notification is either delivered to the capture sink or counted in
``notification_dropped_total`` (events for objects that do not exist are the counted drops).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import (
    NS,
    Controller,
    ThreadedSink,
    apply,
    flux_event,
    get,
    ready,
    wait_for,
)

pytestmark = pytest.mark.e2e

LEASE = "notification-controller-leader-election"
FAST_LEADER = (
    "--enable-leader-election",
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=500ms",
)
OBJECTS = 10  # labelled Kustomizations the events are about
GHOSTS = 3  # objects that do not exist: their lookups fail (404) and must be counted
BURST = 3_000
GHOST_EVENTS = 150
TOKEN = "burst-token"


def manifests(namespace: str, sink_url: str) -> str:
    kustomizations = "".join(
        textwrap.dedent(
            f"""\
            ---
            apiVersion: kustomize.toolkit.fluxcd.io/v1
            kind: Kustomization
            metadata: {{name: app-{i}, namespace: {namespace}, labels: {{team: a}}}}
            spec: {{path: ./app-{i}}}
            """
        )
        for i in range(OBJECTS)
    )
    return kustomizations + textwrap.dedent(
        f"""\
        ---
        apiVersion: source.toolkit.fluxcd.io/v1
        kind: GitRepository
        metadata: {{name: repo, namespace: {namespace}}}
        spec: {{url: https://example.com/repo}}
        ---
        apiVersion: v1
        kind: Secret
        metadata: {{name: hook-token, namespace: {namespace}}}
        stringData: {{token: {TOKEN}}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1
        kind: Receiver
        metadata: {{name: hook, namespace: {namespace}}}
        spec:
          type: generic
          secretRef: {{name: hook-token}}
          resources: [{{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: repo}}]
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Provider
        metadata: {{name: sink, namespace: {namespace}}}
        spec: {{type: generic, address: "{sink_url}/burst"}}
        ---
        apiVersion: notification.toolkit.fluxcd.io/v1beta3
        kind: Alert
        metadata: {{name: team-a, namespace: {namespace}}}
        spec:
          providerRef: {{name: sink}}
          eventSources: [{{kind: Kustomization, name: '*', matchLabels: {{team: a}}}}]
        """
    )


def lease_spec(kube: KubeTestServer) -> dict[str, Any]:
    status, body = kube.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}")
    return dict(body.get("spec") or {}) if status == 200 and isinstance(body, dict) else {}


def apiserver_gets(kube: KubeTestServer, resource: str) -> float:
    """Reads of ``resource`` the API server has served (its own ``apiserver_request_total``).

    A 1.20 server reports a GET of one custom resource under ``verb="LIST"``: both verbs are counted
    (nothing else lists Kustomizations here).
    """
    status, text = kube.request("GET", "/metrics")
    assert status == 200, text
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if (
                sample.name == "apiserver_request_total"
                and sample.labels.get("verb") in ("GET", "LIST")
                and sample.labels.get("resource") == resource
            ):
                total += sample.value
    return total


def controller_metric(ctl: Controller, name: str, **labels: str) -> float:
    with urllib.request.urlopen(ctl.url("metrics", "/metrics"), timeout=5) as resp:
        text = resp.read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def post_hook(url: str) -> int:
    request = urllib.request.Request(url, data=b"{}", method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0  # no answer at all (timed out, connection refused: the process is gone)


class Watcher:
    """Polls the Receiver's webhook and the Lease from a thread while the burst runs."""

    def __init__(self, kube: KubeTestServer, ctl: Controller, hook_url: str | None) -> None:
        self.kube, self.ctl, self.hook_url = kube, ctl, hook_url
        self.webhook_statuses: list[int] = []
        self.renew_times: set[str] = set()
        self.holders: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.hook_url is not None:
                self.webhook_statuses.append(post_hook(self.hook_url))
            spec = lease_spec(self.kube)
            if spec:
                self.renew_times.add(str(spec.get("renewTime")))
                self.holders.add(str(spec.get("holderIdentity") or ""))
            self._stop.wait(0.2)


def post_burst(url: str, events: list[dict[str, Any]]) -> list[int]:
    """POST every event as fast as the server takes them (an event loop in a thread of its own, so the
    test's thread never gets an event loop that outlives it)."""
    statuses: list[int] = []
    thread = threading.Thread(target=lambda: statuses.extend(asyncio.run(_post_all(url, events))))
    thread.start()
    thread.join(60)
    return statuses


async def _post_all(url: str, events: list[dict[str, Any]], concurrency: int = 64) -> list[int]:
    statuses: list[int] = []
    queue = list(reversed(events))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def worker() -> None:
            while queue:
                body = json.dumps(queue.pop()).encode()
                headers = {"Content-Type": "application/json"}
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    statuses.append(resp.status)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    server = ThreadedSink()
    yield server
    server.close()


@contextlib.contextmanager
def leading_controller(
    kube: KubeTestServer, kubeconfig: Path, namespace: str, *extra: str
) -> Iterator[tuple[Controller, str, str]]:
    """A controller that leads, with the Alert and the Receiver reconciled: (controller, identity, hook URL)."""
    ctl = Controller(kube, kubeconfig, *FAST_LEADER, "--log-level=info", *extra, name="burst")
    try:
        ctl.wait_ready()
        leader = str(wait_for(lambda: lease_spec(kube).get("holderIdentity"), what="a lease holder"))
        wait_for(lambda: f"leading as {leader}" in ctl.log(), what="this replica leads")
        for kind, name in (("alert", "team-a"), ("receiver", "hook")):

            def reconciled(kind: str = kind, name: str = name) -> bool:
                return (ready(get(kube, kind, namespace, name)) or ("",))[0] == "True"

            wait_for(reconciled, what=f"{kind} ready")
        digest = hashlib.sha256(f"{TOKEN}hook{namespace}".encode()).hexdigest()
        hook_url = ctl.url("receiver", f"/hook/{digest}")
        wait_for(lambda: post_hook(hook_url) == 200, what="webhook path indexed")
        yield ctl, leader, hook_url
    finally:
        if ctl.proc.poll() is None:
            assert ctl.stop() == 0, ctl.log()[-2000:]
        else:
            ctl.kill()


def burst_accounted(ctl: Controller, sink: ThreadedSink, expected: int, started: float) -> None:
    """Wait until every notification is delivered or counted, and at least 8 s (over two renew deadlines)
    have passed since the burst began, so that a starved Lease renewal would show."""

    def accounted() -> float:
        assert ctl.proc.poll() is None, f"controller exited during the burst:\n{ctl.log()[-2000:]}"
        return len(sink.requests()) + controller_metric(ctl, "notification_dropped_total")

    wait_for(lambda: accounted() >= expected, timeout=30, what="every notification accounted for")
    wait_for(lambda: time.monotonic() - started > 8, timeout=10)


def assert_still_leading(ctl: Controller, watcher: Watcher, leader: str) -> None:
    assert ctl.proc.poll() is None, ctl.log()[-3000:]
    assert "lost leadership" not in ctl.log()
    assert watcher.holders == {leader}
    assert len(watcher.renew_times) >= 6  # retry period 0.5 s over > 8 s: renewed throughout


def test_label_burst_keeps_the_lease_and_webhooks_and_counts_every_notification(
    kube: KubeTestServer, sa_kubeconfig: Path, namespace: str, sink: ThreadedSink
) -> None:
    apply(kube, manifests(namespace, sink.url))
    with leading_controller(kube, sa_kubeconfig, namespace) as (ctl, leader, hook_url):
        events = [
            flux_event(namespace, f"app-{i % OBJECTS}", f"burst {i}") for i in range(BURST - GHOST_EVENTS)
        ] + [flux_event(namespace, f"ghost-{i % GHOSTS}", f"ghost {i}") for i in range(GHOST_EVENTS)]
        gets_before = apiserver_gets(kube, "kustomizations")
        with Watcher(kube, ctl, hook_url) as watcher:
            started = time.monotonic()
            statuses = post_burst(ctl.url("events"), events)
            burst_seconds = time.monotonic() - started
            assert statuses.count(202) == BURST, {s: statuses.count(s) for s in set(statuses)}
            burst_accounted(ctl, sink, BURST, started)
        gets = apiserver_gets(kube, "kustomizations") - gets_before

        delivered = len(sink.requests())
        dropped = controller_metric(ctl, "notification_dropped_total")
        lookup_drops = controller_metric(ctl, "notification_dropped_total", reason="label_lookup")
        print(
            f"\nburst of {BURST} events in {burst_seconds:.1f}s: {gets:.0f} API GETs for labels, "
            f"{len(watcher.renew_times)} Lease renewTimes seen, {delivered} delivered, {dropped:.0f} "
            f"counted dropped ({lookup_drops:.0f} label_lookup), webhook answers "
            f"{sorted(set(watcher.webhook_statuses))} x{len(watcher.webhook_statuses)}"
        )
        assert_still_leading(ctl, watcher, leader)
        assert watcher.webhook_statuses and all(200 <= s < 300 for s in watcher.webhook_statuses), (
            watcher.webhook_statuses
        )
        assert delivered + dropped == BURST
        assert delivered == BURST - GHOST_EVENTS
        assert lookup_drops == GHOST_EVENTS
        assert controller_metric(ctl, "notification_delivered_total") == delivered
        # One GET per object (plus a re-check of a missing one once its short negative entry expires).
        assert gets <= 2 * (OBJECTS + GHOSTS), gets


def test_the_lease_has_its_own_budget_when_lookups_flood_the_shared_client(
    kube: KubeTestServer, sa_kubeconfig: Path, namespace: str, sink: ThreadedSink
) -> None:
    """Distinct objects defeat any cache. Even with the lookup budget raised far beyond the shared client's
    (1,000 GETs in flight against 50 QPS), the Lease renewals keep their own client and the leader stays;
    every notification whose lookup failed, timed out or was refused is counted."""
    apply(kube, manifests(namespace, sink.url))
    distinct = 1_000
    with leading_controller(kube, sa_kubeconfig, namespace, "--label-lookup-concurrency=1000") as (
        ctl,
        leader,
        _,
    ):
        events = [flux_event(namespace, f"ghost-{i}", f"ghost {i}") for i in range(distinct)]
        with Watcher(kube, ctl, None) as watcher:
            started = time.monotonic()
            assert post_burst(ctl.url("events"), events).count(202) == distinct
            burst_accounted(ctl, sink, distinct, started)
        dropped = {
            reason: controller_metric(ctl, "notification_dropped_total", reason=reason)
            for reason in ("label_lookup", "label_lookup_overload")
        }
        print(
            f"\n{distinct} distinct objects: {len(watcher.renew_times)} Lease renewTimes seen, dropped {dropped}"
        )
        assert_still_leading(ctl, watcher, leader)
        assert sum(dropped.values()) == controller_metric(ctl, "notification_dropped_total") == distinct
        assert sink.requests() == []

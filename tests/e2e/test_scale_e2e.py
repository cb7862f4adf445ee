"""Issue 11 item 3 on a real API server: 2,000 Secrets, 2,000 Alerts, 500 Receivers must not take it down.

Against the API server the old controller never became ready with 508 Secrets: listing them fed the log
redactor one Secret at a time, and each one rebuilt a regular expression of every value on the event loop
(quadratic, growing past 2 GB, probes failing: a crash loop in an ordinary cluster). Masking is now
incremental (O(size of the Secret that changed)).

The objects of ``tests/support/scalekit.py`` are created in a fresh namespace with concurrent REST calls,
then the controller starts (subprocess, the ServiceAccount of ``config/rbac``) with the client rate raised
(``--kube-api-qps``: this test is about the controller, not the client-side token bucket). Asserted: ready
(``/readyz`` 200) within ``READY_BOUND`` of the process start; every Receiver reconciled (the last one's
webhook answers 200); 200 Secrets rotated through the API reach their Receivers (new webhook paths answer)
within seconds; every listener answers correctly within ``ANSWER_BOUND`` from the moment it is up, through
start-up, reconciles and the churn; peak RSS under ``RSS_BOUND``. The namespace is emptied afterwards
(finalizers removed), so later tests on the shared API server do not inherit 4,500 objects.
Numbers print with the prefix ``[scale]`` (``-s``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.apiserver import KubeTestServer
from tests.e2e.controllerkit import Controller
from tests.support.scalekit import (
    ANSWER_BOUND,
    CHURN,
    GROUP,
    READY_BOUND,
    RECEIVERS,
    RSS_BOUND,
    ListenerProbes,
    hook_path,
    http,
    population,
    receiver_secret,
    rss,
    secret,
)

pytestmark = pytest.mark.e2e

CONCURRENCY = 32
KINDS = {  # kind -> (API path prefix, plural)
    "Secret": ("/api/v1", "secrets"),
    "Provider": (f"/apis/{GROUP}/v1beta3", "providers"),
    "Alert": (f"/apis/{GROUP}/v1beta3", "alerts"),
    "Receiver": (f"/apis/{GROUP}/v1", "receivers"),
    "GitRepository": ("/apis/source.toolkit.fluxcd.io/v1", "gitrepositories"),
    "Event": ("/api/v1", "events"),
}


def collection(kind: str, namespace: str) -> str:
    prefix, plural = KINDS[kind]
    return f"{prefix}/namespaces/{namespace}/{plural}"


def bulk(kube: KubeTestServer, calls: list[tuple[str, str, Any, str]]) -> list[tuple[int, Any]]:
    """Run (method, path, body, content type) REST calls, ``CONCURRENCY`` at a time on pooled connections.

    On a loop of its own in a worker thread: this test is synchronous, and ``asyncio.run`` here would
    replace (and orphan) the loop the looptime plugin sets up for every test."""
    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        return worker.submit(asyncio.run, _bulk(kube, calls)).result()


async def _bulk(kube: KubeTestServer, calls: list[tuple[str, str, Any, str]]) -> list[tuple[int, Any]]:
    limit = asyncio.Semaphore(CONCURRENCY)
    connector = aiohttp.TCPConnector(ssl=kube.ssl_context(), limit=CONCURRENCY)
    headers = {"Authorization": f"Bearer {kube.token}", "Accept": "application/json"}
    async with aiohttp.ClientSession(kube.url, connector=connector, headers=headers) as session:

        async def one(method: str, path: str, body: Any, content_type: str) -> tuple[int, Any]:
            async with limit:
                kw: dict[str, Any] = {}
                if body is not None:
                    kw = {"json": body, "headers": {"Content-Type": content_type}}
                async with session.request(method, path, **kw) as resp:
                    return resp.status, await resp.json(content_type=None)

        return await asyncio.gather(*(one(*call) for call in calls))


def create(kube: KubeTestServer, objects: list[dict[str, Any]]) -> None:
    calls = [
        ("POST", collection(o["kind"], o["metadata"]["namespace"]), o, "application/json") for o in objects
    ]
    failed = [(status, body) for status, body in bulk(kube, calls) if status != 201]
    assert not failed, failed[:3]


def empty_namespace(kube: KubeTestServer, namespace: str) -> None:
    """Delete every object of the test; drop the finalizers no controller is left to remove."""
    no_finalizers = {"metadata": {"finalizers": None}}
    for kind in ("Alert", "Provider", "Receiver"):
        status, listing = kube.request("GET", collection(kind, namespace))
        if status == 200:
            names = [
                item["metadata"]["name"] for item in listing["items"] if item["metadata"].get("finalizers")
            ]
            patch = "application/merge-patch+json"
            bulk(kube, [("PATCH", f"{collection(kind, namespace)}/{n}", no_finalizers, patch) for n in names])
    for kind in ("Alert", "Provider", "Receiver", "GitRepository", "Secret", "Event"):
        kube.request("DELETE", collection(kind, namespace))
    for kind in ("Alert", "Provider", "Receiver", "Secret"):
        status, listing = kube.request("GET", collection(kind, namespace))
        assert status == 200 and not listing["items"], f"{kind}s left in {namespace}"


@pytest.fixture
def scale_namespace(installed: KubeTestServer, namespace: str) -> Iterator[str]:
    try:
        yield namespace
    finally:
        empty_namespace(installed, namespace)


def wait_until(check: Any, timeout: float, what: str, ctl: Controller) -> float:
    start = time.monotonic()
    while not check():
        if ctl.proc.poll() is not None:
            raise AssertionError(f"controller exited with {ctl.proc.returncode} while waiting for {what}")
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(0.1)
    return time.monotonic() - start


def test_two_thousand_secrets_on_the_api_server(
    installed: KubeTestServer, sa_kubeconfig: Path, scale_namespace: str
) -> None:
    ns = scale_namespace
    t0 = time.monotonic()
    git_repository = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": "podinfo", "namespace": ns},
        "spec": {"interval": "5m", "url": "https://github.com/stefanprodan/podinfo"},
    }
    create(installed, [*population(ns), git_repository])
    created = time.monotonic() - t0

    started = time.monotonic()
    ctl = Controller(installed, sa_kubeconfig, "--kube-api-qps=500", "--kube-api-burst=1000", name="scale")
    try:
        with ListenerProbes(ctl.ports) as probes:
            wait_until(lambda: http("GET", ctl.url("health", "/readyz")) == 200, READY_BOUND, "ready", ctl)
            ready = time.monotonic() - started
            last = ctl.url("receiver", hook_path(ns, RECEIVERS - 1))
            wait_until(lambda: http("POST", last, b"{}") == 200, 90, "every Receiver reconciled", ctl)
            reconciled = time.monotonic() - started
            _, peak_start = rss(ctl.proc.pid)

            # Churn: rotate the Secrets of the first CHURN Receivers through the API while probing.
            mark = probes.mark()
            patch = "application/merge-patch+json"
            calls = [
                (
                    "PATCH",
                    f"{collection('Secret', ns)}/scale-secret-{receiver_secret(i)}",
                    {"stringData": secret(ns, receiver_secret(i), generation=1)["stringData"]},
                    patch,
                )
                for i in range(CHURN)
            ]
            assert all(status == 200 for status, _ in bulk(installed, calls))
            rotated = [
                ctl.url("receiver", hook_path(ns, i, generation=1)) for i in (0, CHURN // 2, CHURN - 1)
            ]
            churn = wait_until(
                lambda: all(http("POST", url, b"{}") == 200 for url in rotated),
                60,
                f"{CHURN} rotated Secrets reaching their Receivers",
                ctl,
            )
            probes.keep_probing(since=mark)  # a little after the churn was absorbed
        current, peak = rss(ctl.proc.pid)
    finally:
        code = ctl.stop()
    log = ctl.log()
    print(
        f"\n[scale] API server: {len(population(ns)) + 1} objects created in {created:.1f}s; ready {ready:.1f}s, "
        f"all Receivers reconciled {reconciled:.1f}s, churn of {CHURN} Secrets {churn:.1f}s; RSS peak "
        f"{peak_start >> 20} MB after start, {peak >> 20} MB overall, {current >> 20} MB at the end;\n"
        f"[scale] from start: {probes.summary()};\n[scale] through the churn: {probes.summary(mark)}"
    )
    probes.assert_answering(ANSWER_BOUND)
    probes.assert_answering(ANSWER_BOUND, since=mark)
    assert peak < RSS_BOUND, f"peak RSS {peak >> 20} MB"
    assert code == 0, log[-3000:]
    assert "Traceback" not in log

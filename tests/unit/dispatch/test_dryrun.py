"""The pipeline in dry run (dispatch/dryrun.py, what ``explain`` builds): the builder's real pipeline with a
queue that keeps, a reporter that remembers per Alert and an HTTP client that records. Real ``ObjectStore``,
real stages, real notifier; the request is recorded, not sent (the Provider's address is a closed port)."""

from __future__ import annotations

import hashlib
import hmac

from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.dispatch.builder import build
from notification_controller.dispatch.dryrun import DryRunQueue, Recorder, RecordingHTTP
from notification_controller.metrics import NoiseMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.store.memory import MemoryStore
from tests.support.memory_cluster import MemoryCluster

NS = "flux-system"
KEY = "dry-run-hmac-key"
GROUP = "kustomize.toolkit.fluxcd.io"


def objects() -> ObjectStore:
    store = ObjectStore()
    docs = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hmac", "namespace": NS},
         "stringData": {"token": KEY}},
        {"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Provider",
         "metadata": {"name": "sink", "namespace": NS},
         "spec": {"type": "generic-hmac", "address": "http://127.0.0.1:9/hook", "secretRef": {"name": "hmac"}}},
        {"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Alert",
         "metadata": {"name": "all", "namespace": NS},
         "spec": {"providerRef": {"name": "sink"}, "eventSources": [{"kind": "Kustomization", "name": "*"}]}},
        {"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Alert",
         "metadata": {"name": "quiet", "namespace": NS},
         "spec": {"providerRef": {"name": "sink"}, "eventSources": [{"kind": "Kustomization", "name": "*"}],
                  "threshold": {"count": 2, "within": "1h"}}},
    ]  # fmt: skip
    for doc in docs:
        store.upsert(parse_object(doc))
    store.mark_synced()
    return store


def event() -> Event:
    return Event.from_raw(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": NS,
                "name": "web",
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            },
            "severity": "info",
            "message": "applied",
            "reason": "ReconciliationSucceeded",
            "metadata": {f"{GROUP}/revision": "main@sha1:1", f"{GROUP}/token": "dedup-only"},
            "reportingController": "kustomize-controller",
        }
    )


async def test_the_dry_run_keeps_records_and_sends_nothing() -> None:
    store = objects()
    queue, recorder, http = DryRunQueue(), Recorder(), RecordingHTTP(forward=False)
    pipeline = build(
        store,
        MemoryCluster(),
        http,
        recorder.sink,
        recorder.metrics,
        noise=(MemoryStore(), NoiseMetrics(CollectorRegistry())),
        template_errors=lambda which: None,
        dry_run=(queue, recorder),
    )
    assert pipeline.report is recorder and pipeline.dispatcher.queue is queue

    assert pipeline.dispatcher.admit(event()) == 2  # the memory semantics: answered synchronously
    assert await pipeline.dispatcher.wait_idle(5)  # a stage that awaited (the state store) has finished
    [notification] = queue.take()  # the threshold stage kept the other one back
    assert notification.alert.key == f"{NS}/all"
    assert [str(d.reason) for d in recorder.outcomes[f"{NS}/quiet"].drops] == ["threshold"]

    await pipeline.deliverer.deliver(notification)
    [recorded] = http.take()
    assert http.attempts == 0  # recorded, never sent
    assert recorder.outcomes[f"{NS}/all"].delivered
    assert KEY in recorded.masks
    body = recorded.request.body
    assert (
        isinstance(body, bytes) and b"dedup-only" not in body and b"token" not in body
    )  # the dispatcher's clean-up
    signature = "sha256=" + hmac.new(KEY.encode(), body, hashlib.sha256).hexdigest()
    assert (
        recorded.request.headers["X-Signature"] == signature
    )  # the notifier's own signing, over these bytes
    await pipeline.dispatcher.wait_idle(5)

"""The pipeline records its decisions (issue 27): one record per decision, in the one vocabulary, with the
event's id, the Alert and Provider, and for a sent notification the provider's answer.

The real pipeline (``dispatch/builder.py``) with a real ``MemoryHistory``, delivering to a real capture
server (the rig of ``test_dispatcher.py``). The process-level matrix (duplicates, refusals, the durable
outbox's retries and dead letters) is ``tests/integration/test_history_recording.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.objects import parse_object
from notification_controller.core.redact import Redactor
from notification_controller.dispatch.builder import build
from notification_controller.dispatch.model import Draft, Drop, Notification, Ref
from notification_controller.dispatch.recording import record_notification
from notification_controller.history.memory import MemoryHistory
from notification_controller.history.model import Outcome, Query, Record
from notification_controller.history.recorder import Recorder
from notification_controller.metrics import EventMetrics, HistoryMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from tests.support.capture import CaptureServer, Reply
from tests.support.memory_cluster import MemoryCluster
from tests.support.sinks import LogSink
from tests.unit.dispatch.test_dispatcher import NS, alert, event, provider

SECRET = "s3cr3t-T0KEN-value-4b7d"


class Rig:
    def __init__(self, store: ObjectStore, http: OutboundHTTP, server: CaptureServer) -> None:
        self.store, self.http, self.server = store, http, server
        self.registry = CollectorRegistry()
        self.history = MemoryHistory(metrics=HistoryMetrics(self.registry))
        self.redactor = Redactor()
        self.redactor.set_source("canary", [SECRET])
        self.recorder = Recorder(self.history, self.redactor, HistoryMetrics(CollectorRegistry()))

    def build(self, **stages: object):  # type: ignore[no-untyped-def]
        return build(
            self.store,
            MemoryCluster(),
            self.http,
            LogSink(),
            EventMetrics(CollectorRegistry()),
            redactor=self.redactor,
            history=self.recorder,
            **stages,  # type: ignore[arg-type]
        )

    async def records(self, n: int, **query: object) -> list[Record]:
        """At least ``n`` records matching ``query`` (waits: deliveries run on tasks)."""
        async with asyncio.timeout(30):
            while True:
                found = await self.history.query(Query(**query))  # type: ignore[arg-type]
                if len(found) >= n:
                    return found
                await asyncio.sleep(0.01)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    store = ObjectStore()
    http = OutboundHTTP(RetryPolicy(max_attempts=1))
    await http.start()
    async with CaptureServer() as server:
        store.upsert(parse_object(provider("sink", f"{server.url}/hook/{SECRET}")))
        store.upsert(parse_object(alert("all", "sink")))
        yield Rig(store, http, server)
    await http.close()


async def test_a_delivery_is_recorded_with_the_providers_answer(rig: Rig) -> None:
    pipeline = rig.build()
    try:
        assert pipeline.dispatcher.admit(event(1)) == 1
        (r,) = await rig.records(1, outcome="delivered")
        await rig.server.wait_for(1)
    finally:
        await pipeline.dispatcher.shutdown(1)
    assert r.alert == f"{NS}/all" and r.provider == f"{NS}/sink" and r.provider_type == "generic"
    assert r.object == f"Kustomization/{NS}/app1" and r.severity == "info"
    assert r.reason == "ReconciliationSucceeded" and r.message == "message 1"
    assert r.attempt == 1 and r.status_code == 200 and r.latency_ms is not None and r.latency_ms > 0
    assert r.request.startswith(f"POST http://127.0.0.1:{rig.server.port}/*** (") and SECRET not in r.request
    assert r.event_id and r.notification_id and r.stage == ""
    assert rig.registry.get_sample_value("notification_history_records_total", {"outcome": "delivered"}) == 1


async def test_a_failed_attempt_with_the_memory_store_is_failed_with_status_and_masked_error(
    rig: Rig,
) -> None:
    rig.server.script(Reply(500, f"upstream says {SECRET} is broken"))
    pipeline = rig.build()
    try:
        pipeline.dispatcher.admit(event(2))
        (r,) = await rig.records(1, outcome="failed")
    finally:
        await pipeline.dispatcher.shutdown(1)
    assert r.status_code == 500 and r.attempt == 1 and r.stage  # the failure reason
    assert "500" in r.detail and SECRET not in r.detail and "*****" in r.detail
    assert await rig.history.query(Query(outcome="delivered")) == []


async def test_unmatched_suppressed_and_dropped_decisions(rig: Rig) -> None:
    def hold(draft: Draft) -> Draft | Drop:
        if draft.event.involved_object.name == "held":
            return Drop("silence", f"held by silence {NS}/maintenance", suppressed=True)
        return draft

    rig.store.upsert(
        parse_object(
            {
                **alert("only-git", "sink"),
                "spec": {
                    "providerRef": {"name": "sink"},
                    "eventSources": [{"kind": "GitRepository", "name": "x"}],
                },
            }
        )
    )
    pipeline = rig.build(pre_queue=[hold])
    try:
        unmatched = event(3).model_copy(
            update={"involved_object": event(3).involved_object.model_copy(update={"kind": "HelmRelease"})}
        )
        assert pipeline.dispatcher.admit(unmatched) == 0
        held = event(4).model_copy(
            update={"involved_object": event(4).involved_object.model_copy(update={"name": "held"})}
        )
        pipeline.dispatcher.admit(held)
        rig.store.upsert(parse_object(provider("sink", f"{rig.server.url}/hook", suspend=True, generation=2)))
        pipeline.dispatcher.admit(event(5))
        (none,) = await rig.records(1, outcome="unmatched")
        (suppressed,) = await rig.records(1, outcome="suppressed")
        (dropped,) = await rig.records(1, outcome="dropped")
    finally:
        await pipeline.dispatcher.shutdown(1)
    assert none.alert == "" and none.object == f"HelmRelease/{NS}/app3" and none.detail
    assert suppressed.stage == "silence" and suppressed.detail == f"held by silence {NS}/maintenance"
    assert suppressed.alert == f"{NS}/all" and suppressed.attempt == 0 and suppressed.notification_id == ""
    assert dropped.stage == "suspended" and dropped.object == f"Kustomization/{NS}/app5"
    assert len({none.event_id, suppressed.event_id, dropped.event_id}) == 3


async def test_every_record_of_one_event_shares_its_id(rig: Rig) -> None:
    rig.store.upsert(parse_object(alert("second", "sink")))
    pipeline = rig.build()
    try:
        pipeline.dispatcher.admit(event(6))
        records = await rig.records(2, outcome="delivered")
    finally:
        await pipeline.dispatcher.shutdown(1)
    assert {r.alert for r in records} == {f"{NS}/all", f"{NS}/second"}
    assert len({r.event_id for r in records}) == 1 and len({r.notification_id for r in records}) == 2
    assert await rig.history.query(Query(event_id=records[0].event_id)) == records


def test_a_notification_keeps_its_event_id_and_an_older_one_still_loads() -> None:
    n = Notification("0f3c", event(8), Ref(NS, "all", 3), Ref(NS, "sink", 1), "generic", event_id="ev-1")
    assert Notification.from_json(n.to_json()).event_id == "ev-1"
    old = Notification("0f3d", event(8), Ref(NS, "all", 3), Ref(NS, "sink", 1), "generic")
    assert b"eventId" not in old.to_json()  # what a version without the field stored
    assert Notification.from_json(old.to_json()).event_id == ""


async def test_a_notification_without_an_event_id_is_its_own_event() -> None:
    history = MemoryHistory()
    n = Notification("group-1", event(9), Ref(NS, "all", 3), Ref(NS, "sink", 1), "generic")
    record_notification(Recorder(history, Redactor()), Outcome.DELIVERED, n)
    (r,) = await history.query(Query())
    assert r.event_id == "group-1" and r.attempt == 1

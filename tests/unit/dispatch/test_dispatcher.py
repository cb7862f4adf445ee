"""The dispatch pipeline's shape (issue 12 items 1-2): stage slots, drop reasons, plain notifications.

The real pipeline (``dispatch/builder.py``) on a real ``ObjectStore``, delivering to a real local capture
server. Each test builds it with its stage lists whole: nothing is appended after construction.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.api.provider import Provider
from notification_controller.dispatch.builder import Pipeline, build
from notification_controller.dispatch.dispatcher import Dispatcher
from notification_controller.dispatch.lanes import MemoryLanes
from notification_controller.dispatch.model import Delivery, Draft, Drop, DropReason, Notification, Ref
from notification_controller.errors import ControllerError
from notification_controller.metrics import EventMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.providers.message import Message
from tests.support.capture import CaptureServer, Reply
from tests.support.memory_cluster import MemoryCluster
from tests.support.sinks import LogSink

NS = "flux-system"
KS = "kustomize.toolkit.fluxcd.io"


def event(n: int = 0, *, commit: bool = False) -> Event:
    metadata = {f"{KS}/revision": "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41"}
    if commit:
        metadata["event.toolkit.fluxcd.io/commit"] = "0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41"
    return Event.from_raw(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": NS,
                "name": f"app{n}",
                "apiVersion": f"{KS}/v1",
            },
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": f"message {n}",
            "reason": "ReconciliationSucceeded",
            "metadata": metadata,
            "reportingController": "kustomize-controller",
        }
    )


def provider(
    name: str, address: str, ptype: str = "generic", generation: int = 1, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Provider",
        "metadata": {"name": name, "namespace": NS, "generation": generation, "uid": "5e0c6a1f-aaaa-bbbb"},
        "spec": {"type": ptype, "address": address, **spec},
    }


def alert(name: str, provider_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Alert",
        "metadata": {"name": name, "namespace": NS, "generation": 3},
        "spec": {
            "providerRef": {"name": provider_name},
            "eventSources": [{"kind": "Kustomization", "name": "*"}],
        },
    }


@dataclass
class Rig:
    store: ObjectStore
    http: OutboundHTTP
    server: CaptureServer
    registry: CollectorRegistry
    sink: LogSink = field(default_factory=LogSink)
    pipeline: Pipeline | None = None

    def build(self, **stages: Any) -> Dispatcher:
        """The pipeline with ``pre_queue``/``pre_send`` stages after the standard ones."""
        assert self.pipeline is None
        self.pipeline = build(
            self.store, MemoryCluster(), self.http, self.sink, EventMetrics(self.registry), **stages
        )
        return self.pipeline.dispatcher

    @property
    def dispatcher(self) -> Dispatcher:
        return self.pipeline.dispatcher if self.pipeline is not None else self.build()

    @property
    def lanes(self) -> MemoryLanes:
        lanes = self.dispatcher.queue
        assert isinstance(lanes, MemoryLanes)
        return lanes

    def dropped(self, reason: str, ptype: str = "generic") -> float:
        value = self.registry.get_sample_value(
            "notification_dropped_total", {"provider_type": ptype, "reason": reason}
        )
        return value or 0.0


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    registry = CollectorRegistry()
    store = ObjectStore()
    http = OutboundHTTP(RetryPolicy(max_attempts=1))
    await http.start()
    async with CaptureServer() as server:
        store.upsert(parse_object(provider("sink", f"{server.url}/hook")))
        store.upsert(parse_object(alert("all", "sink")))
        rig = Rig(store, http, server, registry)
        yield rig
        if rig.pipeline is not None:
            await rig.pipeline.dispatcher.shutdown(1)
    await http.close()


def test_a_ref_is_made_once_per_object_version() -> None:
    """``Ref.of`` remembers the Ref of an object (issue 29: not one per notification) by identity: a new
    version of the object (the store swaps objects on every change) gets its own, with its generation."""

    def parsed(doc: dict[str, Any]) -> Provider:
        obj = parse_object(doc)
        assert isinstance(obj, Provider)
        return obj

    first = parsed(provider("sink", "http://127.0.0.1:9/x", generation=1))
    assert Ref.of(first) is Ref.of(first)
    assert Ref.of(first) == Ref(NS, "sink", 1)
    second = parsed(provider("sink", "http://127.0.0.1:9/x", generation=2))
    assert Ref.of(second) == Ref(NS, "sink", 2)
    assert Ref.of(first) == Ref(NS, "sink", 1)  # the old version still answers its own
    keep = [parsed(provider(f"p{i}", "http://127.0.0.1:9/x")) for i in range(5000)]
    assert [Ref.of(p).name for p in keep] == [f"p{i}" for i in range(5000)]
    assert len(Ref._refs) <= 4096  # bounded: replaced objects do not accumulate


def test_notification_is_plain_data_and_round_trips_through_json() -> None:
    n = Notification(
        "0f3c",
        event(7, commit=True),
        Ref(NS, "all", 3),
        Ref(NS, "sink", 1),
        "github",
        "kustomization/app7/5e0c6a1f",
        2,
    )
    raw = n.to_json()
    assert Notification.from_json(raw) == n
    assert b'"message":"message 7"' in raw  # the event as Flux's wire JSON, readable in the store
    for field_ in dataclasses.fields(Notification):  # nothing live: every field is data
        assert field_.type in (
            "str",
            "Event",
            "Ref",
            "int",
            "Message | None",
            "tuple[tuple[str, str, str], ...]",
            "float",
        ), field_
    # the event's receipt travels with it (notification_delivery_latency_seconds survives the outbox)
    assert n.received_at > 0 and Notification.from_json(raw).received_at == n.received_at
    # a stage's message (a group, a recovery) travels with it
    grouped = dataclasses.replace(
        n,
        message=Message("3 events", "a\nb", "error", (("occurrences", "3"),)),
        group=(("kustomization/a.ns", "error", "a failed"),),
    )
    assert Notification.from_json(grouped.to_json()) == grouped
    with pytest.raises(ControllerError, match="unreadable stored notification"):
        Notification.from_json(b'{"v": 99}')
    with pytest.raises(ControllerError):
        Notification.from_json(b"not json")


def test_drop_reasons_are_the_metric_labels_in_use() -> None:
    labels = {r.value for r in DropReason}
    # every reason the dashboards and docs name (config/monitoring, docs/metrics.md)
    for used in ("overload", "shutdown", "suspended", "commit_status", "change_request", "hook", "config"):
        assert used in labels
    assert all(r.value == r.value.lower() and " " not in r.value for r in DropReason)


@dataclass
class Recorder:
    name: str
    seen: list[str]
    verdict: str = "pass"

    def __call__(self, draft: Draft) -> Draft | Drop:
        self.seen.append(f"{self.name}:{draft.provider.metadata.name if draft.provider else None}")
        if self.verdict == "drop":
            return Drop("noise", "dropped by the test stage")
        return draft


async def test_a_stage_is_added_without_touching_the_orchestrator_and_runs_after_fluxs_rules(
    rig: Rig,
) -> None:
    seen: list[str] = []
    rig.build(pre_queue=[Recorder("mine", seen)])
    assert [s.name for s in rig.dispatcher.pre_queue.stages][:3] == [
        "cross-namespace",
        "provider",
        "provider-suspended",
    ]
    assert rig.dispatcher.admit(event()) == 1
    assert await rig.dispatcher.wait_idle(10)
    assert seen == ["mine:sink"]  # Flux's rules ran first: the Provider is resolved
    assert len(await rig.server.wait_for(1)) == 1


async def test_a_pre_queue_drop_never_takes_a_pending_slot(rig: Rig) -> None:
    """The noise-control contract: dropped before the lanes, so it cannot crowd out real notifications."""
    seen: list[str] = []
    rig.build(pre_queue=[Recorder("noise", seen, verdict="drop")])
    peak = 0
    original = rig.lanes.put

    def watching(n: Notification) -> bool:
        nonlocal peak
        peak += 1
        return original(n)

    rig.lanes.put = watching  # type: ignore[method-assign,assignment]
    for n in range(50):
        rig.dispatcher.admit(event(n))
    assert await rig.dispatcher.wait_idle(10)
    assert (peak, rig.lanes.pending, len(seen)) == (0, 0, 50)
    assert rig.dropped("noise") == 50
    assert (
        rig.registry.get_sample_value("notification_notifications_total", {"provider_type": "generic"})
        is None
    )
    assert rig.server.requests == []


async def test_an_async_pre_queue_stage_is_awaited_in_order(rig: Rig) -> None:
    order: list[str] = []

    class Slow:
        name = "slow"

        async def __call__(self, draft: Draft) -> Draft | Drop:
            await asyncio.sleep(0.01)
            order.append("slow")
            return dataclasses.replace(draft, event=draft.event.model_copy(update={"message": "rewritten"}))

    rig.build(pre_queue=[Slow(), Recorder("after", order)])
    rig.dispatcher.admit(event())
    assert await rig.dispatcher.wait_idle(10)
    assert order == ["slow", "after:sink"]
    [req] = await rig.server.wait_for(1)
    assert req.json()["message"] == "rewritten"


async def test_pre_send_stages_see_the_resolved_delivery(rig: Rig) -> None:
    seen: list[tuple[str, str, int]] = []

    class Look:
        name = "look"

        async def __call__(self, delivery: Delivery) -> Delivery | Drop:
            seen.append(
                (
                    delivery.provider.metadata.name,
                    delivery.alert.metadata.name,
                    delivery.notification.alert.generation,
                )
            )
            return Drop(DropReason.HOOK, "no", warn=True)

    rig.build(pre_send=[Look()])
    rig.dispatcher.admit(event())
    assert await rig.dispatcher.wait_idle(10)
    assert seen == [("sink", "all", 3)]
    assert rig.dropped("hook") == 1
    assert [e[2] for e in rig.sink.events] == ["NotificationDropped"]


async def test_the_notifier_is_resolved_at_send_time_from_the_current_provider(rig: Rig) -> None:
    """Queued against generation 1, sent with generation 2's address; a deleted Provider is ``gone``."""
    async with CaptureServer() as moved:
        gate = asyncio.Event()

        class Hold:
            name = "hold"

            async def __call__(self, delivery: Delivery) -> Delivery | Drop:
                if delivery.event.involved_object.name == "app1":  # the first event only
                    await gate.wait()
                return delivery

        rig.build(pre_send=[Hold()])
        rig.dispatcher.admit(event(1))
        await asyncio.sleep(0.05)
        rig.store.upsert(parse_object(provider("sink", f"{moved.url}/new", generation=2)))
        rig.dispatcher.admit(event(2))  # resolved after the change: goes to the new address
        gate.set()
        assert await rig.dispatcher.wait_idle(10)
        assert len(await moved.wait_for(1)) == 1
    # the held one was resolved before the change (the stage sees the resolved delivery): old address
    assert len(rig.server.requests) == 1
    rig.store.delete("Provider", NS, "sink")
    rig.store.upsert(parse_object(provider("other", rig.server.url)))
    rig.lanes.put(Notification("x", event(3), Ref(NS, "all", 3), Ref(NS, "sink", 1), "generic"))
    assert await rig.dispatcher.wait_idle(10)
    assert rig.dropped("gone") == 1


async def test_commit_status_notifications_reuse_the_cached_notifier(rig: Rig) -> None:
    """The commit-status id travels per delivery: 20 events to a GitHub Provider build one notifier
    (the old dispatcher rebuilt it for every event)."""
    rig.server.on("GET", r"/api/v3/repos/org/repo/commits/.*/statuses", Reply(200, body=[]))
    rig.server.on("POST", r"/api/v3/repos/org/repo/statuses/.*", Reply(201, body={"id": 1}))
    rig.store.upsert(
        parse_object(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "gh", "namespace": NS},
                "stringData": {"token": "ghp_test_token_value"},
            }
        )
    )
    rig.store.upsert(
        parse_object(provider("sink", f"{rig.server.url}/org/repo", "github", secretRef={"name": "gh"}))
    )
    for n in range(20):
        rig.dispatcher.admit(event(n, commit=True))
    assert await rig.dispatcher.wait_idle(20)
    assert rig.pipeline is not None and rig.pipeline.deliverer.notifiers.builds == 1
    posts = [r for r in rig.server.requests if r.method == "POST"]
    statuses = [r.json() for r in posts]
    assert len(statuses) == 20
    assert {s["context"] for s in statuses} == {f"kustomization/app{n}/5e0c6a1f" for n in range(20)}


async def test_a_pre_send_stage_can_supply_the_message_every_chat_provider_renders(rig: Rig) -> None:
    """The seam templates (issue 15) and groups (issue 14) use: Delivery.message reaches the provider."""
    from notification_controller.providers.message import Message

    class Retitle:
        name = "retitle"

        async def __call__(self, delivery: Delivery) -> Delivery | Drop:
            return dataclasses.replace(delivery, message=Message("custom title", "custom text", "info"))

    rig.store.upsert(parse_object(provider("sink", f"{rig.server.url}/slack", "slack")))
    rig.build(pre_send=[Retitle()])
    rig.dispatcher.admit(event())
    assert await rig.dispatcher.wait_idle(10)
    [req] = await rig.server.wait_for(1)
    attachment = req.json()["attachments"][0]
    assert (attachment["author_name"], attachment["text"]) == ("custom title", "custom text")

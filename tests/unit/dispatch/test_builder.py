"""The pipeline as a value (issue 24 item 1): the builder writes every stage list out, in the order the app
had, before anything runs them; the memory store's answer stays synchronous with every stage of the app
in place; a durable store's is an awaitable that ends once the notifications are stored; the conductor
stays a page. Real stores (memory, SQLite), real ``ObjectStore``; nothing is delivered."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.dispatch.builder import Pipeline, build
from notification_controller.dispatch.model import Delivery, Drop
from notification_controller.lib.clock import SystemClock
from notification_controller.metrics import DeliveryMetrics, EventMetrics, NoiseMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.outbound import OutboundHTTP
from notification_controller.sandbox import SandboxPool
from notification_controller.settings import SandboxSettings
from notification_controller.store import open_store
from notification_controller.store.instrumented import InstrumentedStore
from notification_controller.store.memory import MemoryStore
from tests.support.memory_cluster import MemoryCluster
from tests.support.sinks import LogSink

NS = "flux-system"
PACKAGE = Path(__file__).resolve().parents[3] / "notification_controller" / "dispatch"

FLUX_RULES = [
    "cross-namespace",
    "provider",
    "provider-suspended",
    "commit-status-update",
    "commit-status-metadata",
    "change-request",
    "workload-identity",
    "metadata",
    "notifier",
    "commit-status-id",
]
NOISE = ["noise-filter", "noise-threshold", "noise-state", "noise-repeat", "noise-group"]
QUIET = ["quiet-silence", "quiet-window", "quiet-inhibit"]  # issue 26: after noise control (docs/silences.md)


class Hooks:
    name = "hooks"

    async def __call__(self, delivery: Delivery) -> Delivery | Drop:
        return delivery


def objects() -> ObjectStore:
    store = ObjectStore()
    store.upsert(
        parse_object(
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Provider",
                "metadata": {"name": "sink", "namespace": NS},
                "spec": {"type": "generic", "address": "http://127.0.0.1:9/hook"},
            }
        )
    )
    store.upsert(
        parse_object(
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Alert",
                "metadata": {"name": "all", "namespace": NS},
                "spec": {
                    "providerRef": {"name": "sink"},
                    "eventSources": [{"kind": "Kustomization", "name": "*"}],
                },
            }
        )
    )
    return store


def event() -> Event:
    return Event.from_raw(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": NS, "name": "app", "apiVersion": "v1"},
            "severity": "info",
            "timestamp": "2026-11-22T10:00:00Z",
            "message": "ok",
            "reason": "ReconciliationSucceeded",
            "reportingController": "kustomize-controller",
        }
    )


def app_pipeline(store: ObjectStore, durable: InstrumentedStore | None) -> Pipeline:
    """What app.py builds: hooks, templates, noise control, a sandbox (never started: nothing here needs it)."""
    registry = CollectorRegistry()
    noise_state = durable if durable is not None else MemoryStore()
    return build(
        store,
        MemoryCluster(),
        OutboundHTTP(),
        LogSink(),
        EventMetrics(registry),
        clock=SystemClock(),
        sandbox=SandboxPool(SandboxSettings(), registry=registry),
        hooks=[Hooks()],
        template_errors=lambda which: None,
        noise=(noise_state, NoiseMetrics(registry)),
        durable=durable,
    )


def names(stages: Any) -> list[str]:
    return [stage.name for stage in stages]


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[InstrumentedStore]:
    store = InstrumentedStore(
        open_store(f"sqlite:{tmp_path / 'state.db'}"), DeliveryMetrics(CollectorRegistry())
    )
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def test_memory_store_stage_lists_are_written_out_in_the_apps_order_and_frozen() -> None:
    pipeline = app_pipeline(objects(), None)
    assert names(pipeline.dispatcher.pre_queue.stages) == [*FLUX_RULES, *NOISE, *QUIET]
    assert names(pipeline.deliverer.pre_send.stages) == [
        "hooks",
        "template",
        "noise-thread",
        "resolve-in-place",
    ]
    assert names(pipeline.deliverer.post_send.stages) == ["noise-thread-started", "resolve-in-place-record"]
    for runner in (pipeline.dispatcher.pre_queue, pipeline.deliverer.pre_send, pipeline.deliverer.post_send):
        assert isinstance(runner.stages, tuple)  # nothing appended after construction
    assert pipeline.outbox is None and not pipeline.dispatcher.queue.durable


async def test_durable_store_defers_tenant_expressions_to_send_time(sqlite: InstrumentedStore) -> None:
    pipeline = app_pipeline(objects(), sqlite)
    assert names(pipeline.dispatcher.pre_queue.stages) == [*FLUX_RULES, *NOISE, *QUIET]
    assert names(pipeline.deliverer.pre_send.stages) == [
        "noise-filter-at-send",
        "commit-status-at-send",
        "hooks",
        "template",
        "noise-thread",
        "resolve-in-place",
    ]
    assert pipeline.outbox is not None and pipeline.dispatcher.queue is pipeline.outbox
    assert not hasattr(pipeline.outbox, "dispatcher")  # no back-pointer: it holds Deliverer.deliver


async def test_memory_store_answers_synchronously_with_every_app_stage_in_place() -> None:
    """The event server's task-free 202: ``admit`` returns an int, and no task was started for it."""
    pipeline = app_pipeline(objects(), None)
    dispatcher = pipeline.dispatcher
    try:
        dispatcher.queue.close()  # refuse at the queue: the test is about the answer, not the delivery
        answer = dispatcher.admit(event())
        assert answer == 1 and not inspect.isawaitable(answer)
        assert not pipeline.report.busy
    finally:
        await dispatcher.shutdown(1)


async def test_durable_store_answers_once_the_notification_is_stored(sqlite: InstrumentedStore) -> None:
    pipeline = app_pipeline(objects(), sqlite)
    answer = pipeline.dispatcher.admit(event())
    assert inspect.isawaitable(answer)
    assert (await sqlite.stats()) == {}  # nothing stored before the answer is awaited
    assert await answer == 1
    stats = await sqlite.stats()
    assert stats[f"{NS}/sink"].depth == 1
    await pipeline.dispatcher.shutdown(1)


def test_the_conductor_is_a_page_and_no_dispatch_module_is_over_300_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert sizes["dispatcher.py"] <= 150
    assert {name: n for name, n in sizes.items() if n > 300} == {}

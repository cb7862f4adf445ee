"""Stages and the queue in spans (``dispatch/traced.py``), and the trace context on a ``Notification`` (it
must survive the durable outbox: ``to_json``/``from_json``). Real stages, the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from notification_controller.api.objects import parse_object
from notification_controller.dispatch.model import Draft, Drop, Notification, Ref
from notification_controller.dispatch.stage import Runner, Stage, StageLike
from notification_controller.dispatch.traced import TracedQueue, traced, traced_queue
from notification_controller.tracing import CURRENT, NOOP
from notification_controller.tracing.otel import OTelTracer
from tests.unit.dispatch.test_dispatcher import NS, alert, event

SENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def tracer() -> tuple[OTelTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return OTelTracer("http://127.0.0.1:4318", exporter=exporter), exporter


async def spans(t: OTelTracer, exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    await t.shutdown(timeout=5)
    return {s.name: s for s in exporter.get_finished_spans()}


def draft() -> Draft:
    a = parse_object(alert("all", "sink"))
    return Draft(event(1), a)  # type: ignore[arg-type]


async def test_only_the_stages_that_act_have_spans_under_the_current_one() -> None:
    t, exporter = tracer()

    async def held(d: Draft) -> Draft | Drop:
        await asyncio.sleep(0)
        return Drop("silenced", "held by Silence flux-system/freeze; token=CANARYsecret123", suppressed=True)

    async def waits_and_passes(d: Draft) -> Draft | Drop:
        await asyncio.sleep(0)
        return d

    stages = traced(
        [Stage("passes", lambda d: d), Stage("waits", waits_and_passes), Stage("silence", held)],
        Draft,
        t,
        lambda text: text.replace("CANARYsecret123", "*****"),
    )
    assert [s.name for s in stages] == ["passes", "waits", "silence"]
    dropped: list[Drop] = []
    runner = Runner(stages, Draft, lambda value, drop: dropped.append(drop), lambda *a: None)
    parent = t.start("POST /", parent=SENT)
    token = CURRENT.set(parent)
    try:
        pending = runner.run(draft())
        assert pending is not None and not isinstance(pending, Draft)
        task = asyncio.ensure_future(pending)  # as the dispatcher spawns it: the task copies CURRENT
    finally:
        CURRENT.reset(token)
    assert await task is None and dropped[0].reason == "silenced"  # the runner's contract is unchanged
    parent.end()
    got = await spans(t, exporter)
    assert set(got) == {"POST /", "stage silence"}  # passing (even after awaiting) is not acting
    stage = got["stage silence"]
    assert stage.parent is not None and stage.parent.span_id == got["POST /"].context.span_id
    assert stage.attributes == {
        "notification.alert": f"{NS}/all",
        "notification.stage": "silence",
        "notification.decision": "suppressed",
        "notification.reason": "silenced",
        "notification.detail": "held by Silence flux-system/freeze; token=*****",
    }


async def test_a_stage_that_raises_is_a_failed_span_and_still_raises() -> None:
    t, exporter = tracer()

    def broken(d: Draft) -> Draft:
        raise KeyError("bug")

    failures: list[Exception] = []
    runner = Runner(
        traced([Stage("broken", broken)], Draft, t, str),
        Draft,
        lambda *a: None,
        lambda v, s, e: failures.append(e),
    )
    assert runner.run(draft()) is None and isinstance(failures[0], KeyError)
    got = await spans(t, exporter)
    assert got["stage broken"].attributes["error.type"] == "KeyError"  # type: ignore[index]


def test_off_the_lists_and_the_queue_are_the_same_objects() -> None:
    stages: list[StageLike[Draft]] = [Stage("passes", lambda d: d)]
    assert traced(stages, Draft, NOOP, str) is stages

    class Queue:
        durable = False
        pending = 0

    queue: Any = Queue()
    assert traced_queue(queue, NOOP) is queue


def notification(traceparent: str = "") -> Notification:
    return Notification(
        "0f3c", event(7), Ref(NS, "all", 3), Ref(NS, "sink", 1), "generic", traceparent=traceparent
    )


def test_the_traceparent_survives_the_stored_form_and_old_rows_still_load() -> None:
    n = notification(SENT)
    assert Notification.from_json(n.to_json()).traceparent == SENT
    assert b'"traceparent"' not in notification().to_json()  # off: the stored form is unchanged
    old = notification().to_json()
    assert Notification.from_json(old).traceparent == ""  # a row written before tracing existed
    forged = old.replace(b'"attempt":0', b'"attempt":0,"traceparent":"00-zz-' + b"x" * 5000 + b'"')
    assert len(Notification.from_json(forged).traceparent) == 55  # bounded; the tracer refuses it when used


async def test_the_queue_span_is_the_parent_every_notification_carries() -> None:
    t, exporter = tracer()
    received: list[Sequence[Notification]] = []

    class Lanes:
        durable = False
        pending = 0

        def enqueue(self, notifications: Sequence[Notification], /) -> None:
            received.append(notifications)

        def close(self) -> None: ...

        async def wait_idle(self, timeout: float | None = None) -> bool:
            return True

        async def shutdown(self, grace: float) -> int:
            return 0

    queue = traced_queue(Lanes(), t)
    assert isinstance(queue, TracedQueue)
    parent = t.start("POST /", parent=SENT)
    token = CURRENT.set(parent)
    try:
        assert queue.enqueue([notification(), notification()]) is None
    finally:
        CURRENT.reset(token)
    parent.end()
    got = await spans(t, exporter)
    span = got["enqueue memory"]
    assert span.parent is not None and span.parent.span_id == got["POST /"].context.span_id
    assert {n.traceparent for n in received[0]} == {
        f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-01"
    }
    assert span.attributes["notification.count"] == 2  # type: ignore[index]

"""The SDK-backed tracer (``tracing/otel.py``) with the SDK's own in-memory exporter: parents, sampling,
bounds, and an exporter that hangs (the loop never waits for it; shutdown is bounded)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind as OTelKind
from opentelemetry.trace import StatusCode

from notification_controller.errors import ConfigError
from notification_controller.tracing import MAX_VALUE, SpanKind
from notification_controller.tracing.otel import MAX_ATTRIBUTES, MAX_QUEUE, OTelTracer, traces_url

SENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def finished(tracer: OTelTracer, exporter: InMemorySpanExporter) -> tuple[ReadableSpan, ...]:
    await tracer.shutdown(timeout=5)
    return exporter.get_finished_spans()


async def test_parents_kinds_and_the_traceparent_of_a_span() -> None:
    exporter = InMemorySpanExporter()
    tracer = OTelTracer("http://127.0.0.1:4318", exporter=exporter)
    server = tracer.start("POST /", parent=SENT, kind=SpanKind.SERVER)
    child = tracer.start("match", parent=server)
    root = tracer.start("enqueue memory", kind=SpanKind.PRODUCER)  # no parent: a trace of its own
    from_text = tracer.start("deliver generic", parent=child.traceparent, kind=SpanKind.CLIENT)
    for span in (from_text, root, child, server):
        span.end()
    by_name = {s.name: s for s in await finished(tracer, exporter)}
    got = by_name["POST /"]
    assert got.context is not None and got.parent is not None
    assert f"{got.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert f"{got.parent.span_id:016x}" == "00f067aa0ba902b7" and got.parent.is_remote
    assert got.kind == OTelKind.SERVER
    assert server.traceparent == f"00-{got.context.trace_id:032x}-{got.context.span_id:016x}-01"
    assert by_name["match"].parent is not None and by_name["match"].parent.span_id == got.context.span_id
    deliver = by_name["deliver generic"]
    assert deliver.parent is not None and deliver.parent.span_id == by_name["match"].context.span_id
    assert deliver.kind == OTelKind.CLIENT
    assert by_name["enqueue memory"].parent is None
    assert by_name["enqueue memory"].context.trace_id != got.context.trace_id


async def test_an_unsampled_caller_is_respected_and_its_trace_still_propagates() -> None:
    exporter = InMemorySpanExporter()
    tracer = OTelTracer("http://127.0.0.1:4318", exporter=exporter)
    span = tracer.start("POST /", parent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
    assert not span.span.is_recording()  # type: ignore[attr-defined]
    assert span.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-") and span.traceparent.endswith(
        "-00"
    )
    span.end()
    assert await finished(tracer, exporter) == ()


async def test_an_invalid_traceparent_starts_a_new_trace() -> None:
    exporter = InMemorySpanExporter()
    tracer = OTelTracer("http://127.0.0.1:4318", exporter=exporter)
    tracer.start("POST /", parent="00-zzzz-nonsense-01").end()
    (span,) = await finished(tracer, exporter)
    assert span.parent is None


async def test_attributes_are_bounded_and_failures_are_errors() -> None:
    exporter = InMemorySpanExporter()
    tracer = OTelTracer("http://127.0.0.1:4318", exporter=exporter)
    span = tracer.start("x", attributes={"big": "y" * 100_000})
    for i in range(1000):
        span.set(f"k{i}", "z" * 10_000)
    span.fail("http_503")
    span.end()
    span.end()  # twice: harmless
    (got,) = await finished(tracer, exporter)
    assert got.attributes is not None
    assert len(got.attributes) == MAX_ATTRIBUTES
    assert all(len(str(v)) <= MAX_VALUE for v in got.attributes.values())
    assert got.status.status_code == StatusCode.ERROR


class Hanging(SpanExporter):
    """An exporter whose export never returns until released (a collector that accepts and never answers)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        self.release.wait(30)
        return SpanExportResult.FAILURE


async def test_a_hanging_exporter_never_holds_the_loop_and_memory_stays_bounded() -> None:
    exporter = Hanging()
    tracer = OTelTracer("http://127.0.0.1:4318", exporter=exporter)
    try:
        started = time.perf_counter()
        for i in range(20_000):
            tracer.start("deliver generic", attributes={"i": i}).end()
        elapsed = time.perf_counter() - started
        assert elapsed < 10, elapsed  # ~20 µs a span; the export thread is stuck all along
        waiting = tracer.processor._batch_processor._queue  # the SDK's deque: the bound we rely on
        assert len(waiting) <= MAX_QUEUE
        loop = asyncio.get_running_loop()
        before = loop.time()
        await tracer.shutdown(timeout=0.5)  # the export is stuck: shutdown gives up in time
        assert loop.time() - before < 3
    finally:
        exporter.release.set()


def test_the_endpoint_is_a_base_url() -> None:
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("https://collector:4318/") == "https://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/otlp") == "http://collector:4318/otlp/v1/traces"
    for bad in ("collector:4318", "ftp://collector", "http://", "grpc://collector:4317"):
        with pytest.raises(ConfigError, match="--otlp-endpoint"):
            traces_url(bad)
    with pytest.raises(ConfigError) as refused:
        traces_url("ftp://user:CANARYpass@collector/x")
    assert "CANARYpass" not in str(refused.value)


def test_the_sdks_repeated_warnings_are_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    OTelTracer("http://127.0.0.1:4318", exporter=InMemorySpanExporter())
    # the exporter's own loggers (the SDK guards only its batch processor's, with a 20 s duplicate filter)
    logger = logging.getLogger("opentelemetry.exporter.otlp.common.http")
    message = f"Failed to export %s batch ({time.monotonic()})."  # a message no other test logged
    with caplog.at_level(logging.WARNING, logger="opentelemetry"):
        for _ in range(1000):
            logger.warning(message, "spans")
            logger.warning("Transient error %s encountered, retrying", "timeout")  # interleaved
    assert sum("Failed to export" in r.getMessage() for r in caplog.records) == 1


async def test_sampling_is_opentelemetrys_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")  # no event without a traceparent is traced
    exporter = InMemorySpanExporter()
    tracer = OTelTracer("http://127.0.0.1:4318", exporter=exporter)
    root = tracer.start("POST /", kind=SpanKind.SERVER)
    assert not root.span.is_recording() and root.traceparent.endswith("-00")  # type: ignore[attr-defined]
    tracer.start("deliver generic", parent=root.traceparent).end()  # its deliveries follow the decision
    root.end()
    tracer.start("POST /", parent=SENT, kind=SpanKind.SERVER).end()  # the sender sampled it: recorded
    (span,) = await finished(tracer, exporter)
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"

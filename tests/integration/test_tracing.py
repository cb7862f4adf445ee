"""Traces through the pipeline (issue 28 item 2, docs/tracing.md): real controller processes in local mode
with ``--otlp-endpoint``, a real OTLP/HTTP receiver that decodes ``ExportTraceServiceRequest`` with
opentelemetry-proto, and a real HTTP sink.

* memory store: one event with a ``traceparent`` is one trace whose root's parent is the sender's span;
  it covers ingest → match → the stage that acted (a threshold holding an event back) → the queue → the
  delivery, and the sink's request carries the delivery span's ``traceparent``;
* SQLite: the trace survives the durable outbox — a failed attempt and the retry that delivers are both
  children of the queue's span, each with its attempt, outcome, status and failure reason;
* a webhook with a ``traceparent`` is a server span continuing it;
* a collector that never answers stops nothing: every event is delivered, the controller's memory stays
  flat while thousands of spans cannot be exported, and it stops within its grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from notification_controller.core.webhook import webhook_path
from tests.support.capture import CaptureServer, Reply
from tests.support.controllers import ControllerProcess, event, post_event

NS = "flux-system"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
TOKEN = "hook-token-CANARY-0123456789"
SECRET_TEXT = "CANARYsecretPASSWORD42xyz"


@dataclass
class Got:
    """One span as the collector decoded it."""

    name: str
    trace_id: str
    span_id: str
    parent: str
    kind: int
    attributes: dict[str, Any]
    error: bool


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


class Collector:
    """An OTLP/HTTP receiver on 127.0.0.1: ``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest``.
    ``hang``: accept the request and never answer (a collector that is stuck)."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.spans: list[Got] = []
        self.requests = 0
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        assert request.path == "/v1/traces" and request.content_type == "application/x-protobuf"
        body = await request.read()
        if self.hang:
            await self._closing.wait()
            return web.Response(status=503)
        decoded = ExportTraceServiceRequest.FromString(body)
        for resource in decoded.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        Got(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.kind,
                            {a.key: _value(a.value) for a in span.attributes},
                            span.status.code == 2,  # STATUS_CODE_ERROR
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def wait(self, predicate: Any, timeout: float = 30.0) -> list[Got]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self.spans):
            assert loop.time() < deadline, [(s.name, s.attributes) for s in self.spans]
            await asyncio.sleep(0.1)
        return list(self.spans)

    async def __aenter__(self) -> Collector:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()


def manifests(directory: Path, sink_url: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "all.yaml").write_text(
        f"""apiVersion: v1
kind: Secret
metadata: {{name: sink-auth, namespace: {NS}}}
stringData: {{password: {SECRET_TEXT}, username: u}}
---
apiVersion: v1
kind: Secret
metadata: {{name: hook, namespace: {NS}}}
stringData: {{token: {TOKEN}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: sink, namespace: {NS}}}
spec: {{type: generic, address: "{sink_url}/hook", timeout: 1s, secretRef: {{name: sink-auth}}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: all, namespace: {NS}}}
spec:
  providerRef: {{name: sink}}
  eventSeverity: info
  eventSources: [{{kind: Kustomization, name: "*"}}]
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: noisy, namespace: {NS}}}
spec:
  providerRef: {{name: sink}}
  eventSources: [{{kind: Kustomization, name: "*"}}]
  threshold: {{count: 3, within: 10m}}
---
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata: {{name: gh, namespace: {NS}}}
spec:
  type: generic
  resources: [{{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: app}}]
  secretRef: {{name: hook}}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: app, namespace: {NS}}}
spec: {{url: "https://example.com/app", interval: 1m}}
""",
        encoding="utf-8",
    )
    return directory


@contextlib.asynccontextmanager
async def controller(
    tmp: Path, sink: CaptureServer, collector: Collector, *extra: str
) -> AsyncIterator[ControllerProcess]:
    proc = ControllerProcess(
        manifests(tmp / "manifests", sink.url),
        [f"--otlp-endpoint={collector.url}", *extra],
        log_path=tmp / "controller.log",
    )
    await proc.start()
    try:
        yield proc
    finally:
        code = await proc.stop()
        assert code == 0, proc.log()


def by_name(spans: list[Got], name: str) -> list[Got]:
    return [s for s in spans if s.name == name]


def sent_traceparent(request_headers: Any) -> tuple[str, str]:
    """(trace id, span id) of the ``traceparent`` a request carried."""
    value = request_headers["traceparent"]
    version, trace_id, span_id, flags = value.split("-")
    assert (version, flags) == ("00", "01") and len(trace_id) == 32 and len(span_id) == 16
    return trace_id, span_id


async def test_one_event_is_one_trace_from_the_senders_span_to_the_sinks_request(tmp_path: Path) -> None:
    async with CaptureServer() as sink, Collector() as collector:
        async with controller(tmp_path, sink, collector) as proc:
            async with aiohttp.ClientSession() as session:
                body = event("app", message=f"applied; password={SECRET_TEXT}")
                async with session.post(
                    proc.events_url, json=body, headers={"traceparent": TRACEPARENT}
                ) as resp:
                    assert resp.status == 202
            (request,) = await sink.wait_for(1, timeout=20)
            spans = await collector.wait(lambda got: any(s.name == "deliver generic" for s in got))
        mine = [s for s in spans if s.trace_id == TRACE_ID]
        assert {s.trace_id for s in spans} == {TRACE_ID}, "one event: one trace"
        (ingest,) = by_name(mine, "POST /")
        assert ingest.parent == PARENT_ID and ingest.kind == ProtoSpan.SPAN_KIND_SERVER
        assert ingest.attributes["http.response.status_code"] == 202
        assert ingest.attributes["notification.event.object"] == "Kustomization/flux-system/app"
        (match,) = by_name(mine, "match")
        assert match.parent == ingest.span_id and match.attributes["notification.alerts.matched"] == 2
        # the threshold held the event back for the noisy Alert: the stage that acted has its span
        stages = [s for s in mine if s.name.startswith("stage ")]
        (held,) = stages
        assert held.parent == ingest.span_id
        assert held.attributes["notification.alert"] == "flux-system/noisy"
        assert held.attributes["notification.decision"] == "suppressed"
        (queued,) = by_name(mine, "enqueue memory")
        assert queued.parent == ingest.span_id and queued.kind == ProtoSpan.SPAN_KIND_PRODUCER
        (deliver,) = by_name(mine, "deliver generic")
        assert deliver.parent == queued.span_id and deliver.kind == ProtoSpan.SPAN_KIND_CLIENT
        assert deliver.attributes == {
            "notification.provider.type": "generic",
            "notification.alert": "flux-system/all",
            "notification.provider": "flux-system/sink",
            "notification.attempt": 1,
            "notification.id": deliver.attributes["notification.id"],
            "notification.outcome": "delivered",
            "http.response.status_code": 200,
        }
        # the sink's request continues the delivery's span
        assert sent_traceparent(request.headers) == (TRACE_ID, deliver.span_id)
        # nothing secret in any attribute (the Secret's password, the basic-auth header)
        assert not any(SECRET_TEXT in str(s.attributes) for s in spans)


async def test_the_trace_survives_the_durable_outbox_and_each_attempt_is_a_span(tmp_path: Path) -> None:
    async with CaptureServer() as sink, Collector() as collector:
        sink.script(Reply(status=503, body="busy"))  # the first attempt fails, the outbox retries
        db = tmp_path / "state.db"
        fast = ["--delivery-retry-base=50ms", "--delivery-retry-cap=200ms", "--store-ack-wait=2s"]
        async with controller(tmp_path, sink, collector, f"--store=sqlite:{db}", *fast) as proc:
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    proc.events_url, json=event("app"), headers={"traceparent": TRACEPARENT}
                ) as resp:
                    assert resp.status == 202
            requests = await sink.wait_for(2, timeout=20)
            spans = await collector.wait(lambda got: len(by_name(got, "deliver generic")) >= 2)
        (ingest,) = by_name(spans, "POST /")
        assert ingest.parent == PARENT_ID and ingest.trace_id == TRACE_ID
        (queued,) = by_name(spans, "enqueue outbox")
        assert queued.parent == ingest.span_id and queued.trace_id == TRACE_ID
        attempts = sorted(
            by_name(spans, "deliver generic"), key=lambda s: s.attributes["notification.attempt"]
        )
        assert [s.attributes["notification.attempt"] for s in attempts] == [1, 2]
        assert all(s.trace_id == TRACE_ID and s.parent == queued.span_id for s in attempts)
        failed, delivered = attempts
        assert failed.attributes["notification.outcome"] == "retry" and failed.error
        assert failed.attributes["http.response.status_code"] == 503
        assert failed.attributes["error.type"] == "http_503"
        assert delivered.attributes["notification.outcome"] == "delivered" and not delivered.error
        # each request carries the span of its own attempt
        assert [sent_traceparent(r.headers) for r in requests[:2]] == [
            (TRACE_ID, failed.span_id),
            (TRACE_ID, delivered.span_id),
        ]


async def test_a_webhook_with_a_traceparent_continues_its_trace(tmp_path: Path) -> None:
    async with CaptureServer() as sink, Collector() as collector:
        async with controller(tmp_path, sink, collector) as proc:
            path = webhook_path(TOKEN.encode(), "gh", NS)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            async with aiohttp.ClientSession() as session:
                while (
                    True
                ):  # 503 until the Receiver's first reconcile made it Ready (slow on a loaded machine)
                    async with session.post(
                        proc.receiver_url + path, json={"any": "thing"}, headers={"traceparent": TRACEPARENT}
                    ) as resp:
                        if resp.status != 503 or loop.time() > deadline:
                            assert resp.status == 200, await resp.text()
                            break
                    await asyncio.sleep(0.1)
            spans = await collector.wait(
                lambda got: any(
                    s.attributes.get("http.response.status_code") == 200 for s in by_name(got, "POST /hook/")
                )
            )
        (hook,) = [
            s for s in by_name(spans, "POST /hook/") if s.attributes["http.response.status_code"] == 200
        ]
        assert (hook.trace_id, hook.parent) == (TRACE_ID, PARENT_ID)
        assert hook.kind == ProtoSpan.SPAN_KIND_SERVER
        assert hook.attributes["notification.receiver"] == "flux-system/gh"
        assert hook.attributes["notification.receiver.type"] == "generic"
        assert hook.attributes["notification.receiver.outcome"] == "accepted"
        assert hook.attributes["http.response.status_code"] == 200
        # the path is the Receiver's credential: never in a span
        digest = hashlib.sha256(path.encode()).hexdigest()
        assert not any(path in str(s.attributes) or digest in str(s.attributes) for s in spans)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_a_collector_that_hangs_stops_no_delivery_and_costs_no_memory(tmp_path: Path) -> None:
    async with CaptureServer() as sink, Collector(hang=True) as collector:
        async with controller(tmp_path, sink, collector, "--history=false") as proc:
            async with aiohttp.ClientSession() as session:

                async def burst(first: int, n: int) -> None:
                    for i in range(first, first + n):
                        body = event(
                            "app", message=f"applied revision {i}"
                        )  # one object: no noise state grows
                        assert await post_event(session, proc.events_url, body) == 202

                await burst(0, 1500)  # ~6,000 spans: the processor's queue (2,048) is full from here on
                await sink.wait_for(1500, timeout=60)
                assert collector.requests >= 1  # the export is stuck in the collector
                before = rss_kib(proc.pid)
                await burst(1500, 3000)  # ~12,000 more spans that cannot be exported
                await sink.wait_for(4500, timeout=90)  # every event delivered, none waited on the collector
                grown = rss_kib(proc.pid) - before
        # measured: +3 MiB with the SDK's bounded queue (2,048 spans), +56 MiB with an unbounded one
        assert grown < 8 * 1024, f"RSS grew by {grown} KiB while the collector hung"
        # the SDK says "Queue full" once per dropped span: logged once a minute at most
        assert (tmp_path / "controller.log").read_text(errors="replace").count("Queue full") <= 1


def propagation_manifests(directory: Path, sink_url: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    docs = [
        f"""apiVersion: v1
kind: Secret
metadata: {{name: hmac, namespace: {NS}}}
stringData: {{token: {SECRET_TEXT}}}"""
    ]
    for ptype, extra in (("generic-hmac", ", secretRef: {name: hmac}"), ("cloudevents", ""), ("slack", "")):
        name = ptype.replace("-", "")
        docs.append(
            f"""apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {{name: {name}, namespace: {NS}}}
spec: {{type: {ptype}, address: "{sink_url}/{name}", timeout: 1s{extra}}}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {{name: {name}, namespace: {NS}}}
spec:
  providerRef: {{name: {name}}}
  eventSources: [{{kind: Kustomization, name: "*"}}]"""
        )
    (directory / "all.yaml").write_text("\n---\n".join(docs) + "\n", encoding="utf-8")
    return directory


async def test_generic_hmac_and_cloudevents_requests_carry_the_trace_and_a_chat_type_does_not(
    tmp_path: Path,
) -> None:
    async with CaptureServer() as sink, Collector() as collector:
        sink.on("POST", "/slack", Reply(body="ok"))
        proc = ControllerProcess(
            propagation_manifests(tmp_path / "manifests", sink.url),
            [f"--otlp-endpoint={collector.url}"],
            log_path=tmp_path / "controller.log",
        )
        await proc.start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    proc.events_url, json=event("app"), headers={"traceparent": TRACEPARENT}
                ) as resp:
                    assert resp.status == 202
            requests = {r.path: r for r in await sink.wait_for(3, timeout=20)}
            spans = await collector.wait(
                lambda got: len([s for s in got if s.name.startswith("deliver ")]) >= 3
            )
        finally:
            assert await proc.stop() == 0, proc.log()
        deliveries = {s.name: s for s in spans if s.name.startswith("deliver ")}
        assert set(deliveries) == {"deliver generic-hmac", "deliver cloudevents", "deliver slack"}
        assert sent_traceparent(requests["/generichmac"].headers) == (
            TRACE_ID,
            deliveries["deliver generic-hmac"].span_id,
        )
        assert sent_traceparent(requests["/cloudevents"].headers) == (
            TRACE_ID,
            deliveries["deliver cloudevents"].span_id,
        )
        assert "traceparent" not in requests["/slack"].headers  # Slack cannot continue a trace: not sent
        assert deliveries["deliver slack"].trace_id == TRACE_ID  # its delivery is in the trace all the same

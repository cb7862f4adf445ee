"""The ``otel`` provider speaks OTLP/HTTP **protobuf**, as Flux's ``otlptracehttp`` exporter does (issue 16).

A local "collector" behaves like the strict OTLP backends (Elastic APM, Seq) that reject the JSON encoding:
it answers 415 unless the request is ``application/x-protobuf``, decodes the body as an
``ExportTraceServiceRequest`` (400 if it is not one) and answers with an ``ExportTraceServiceResponse``.
The Provider is resolved through the production path (Provider + Secret → ``resolve_options`` →
``create_notifier``), then the decoded span is checked field by field against what the Go SDK emits for
Flux (``internal/notifier/otel.go``): resource, scope, ids, flags, kind, times, attributes and status.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from notification_controller.api.alert import Alert
from notification_controller.api.common import Secret
from notification_controller.api.event import Event
from notification_controller.api.provider import Provider
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.providers.base import DeliveryContext
from notification_controller.providers.options import resolve_options
from notification_controller.providers.otel import SPAN_ATTRIBUTE_COUNT_LIMIT, build_trace, span_attributes
from notification_controller.providers.registry import create_notifier
from tests.support.capture import CapturedRequest, CaptureServer, Reply

ALERT_UID = "7d0a3c55-1b2e-4f60-9a8b-0c1d2e3f4a5b"
REVISION = "main@sha1:5394cb7f48332b2de7c17dd8b8384bbc84b7e738"
FAST = RetryPolicy(max_attempts=2, wait_min=0.01, wait_max=0.02)


class Collector:
    """An OTLP/HTTP traces receiver that accepts only the protobuf encoding."""

    def __init__(self) -> None:
        self.exports: list[ExportTraceServiceRequest] = []

    def __call__(self, req: CapturedRequest) -> Reply:
        if req.headers.get("Content-Type") != "application/x-protobuf":
            return Reply(415, "unsupported media type: only application/x-protobuf")
        try:
            self.exports.append(ExportTraceServiceRequest.FromString(req.body))
        except DecodeError:
            return Reply(400, "body is not an ExportTraceServiceRequest")
        body = ExportTraceServiceResponse().SerializeToString()
        return Reply(200, body, headers={"Content-Type": "application/x-protobuf"})

    def only_span(self) -> tuple[ExportTraceServiceRequest, Span]:
        [export] = self.exports[-1:]
        [resource_spans] = export.resource_spans
        [scope_spans] = resource_spans.scope_spans
        [span] = scope_spans.spans
        return export, span


def the_alert() -> Alert:
    return Alert.model_validate(
        {
            "metadata": {"name": "deployments", "namespace": "apps", "uid": ALERT_UID},
            "spec": {
                "providerRef": {"name": "tempo"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
            },
        }
    )


def event(**kw: Any) -> Event:
    raw: dict[str, Any] = {
        "involvedObject": {
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": "podinfo",
            "uid": "c1d2e3f4-0000-4000-8000-000000000001",
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        },
        "severity": "error",
        "timestamp": "2026-03-01T10:20:30Z",
        "message": "health check failed after 30s",
        "reason": "HealthCheckFailed",
        "metadata": {"revision": REVISION, "env": "prod"},
        "reportingController": "kustomize-controller",
    }
    raw.update(kw)
    return Event.from_raw(raw)


def provider_options(address: str) -> Any:
    provider = Provider.model_validate(
        {
            "metadata": {"name": "tempo", "namespace": "apps", "uid": "p-uid"},
            "spec": {"type": "otel", "address": address, "secretRef": {"name": "tempo-auth"}},
        }
    )
    # A Content-Type in the headers must not win: the exporter always sets its own.
    secret = Secret.from_manifest(
        {
            "metadata": {"name": "tempo-auth", "namespace": "apps"},
            "stringData": {
                "token": "otel-token",
                "headers": "X-Scope-OrgID: platform\nContent-Type: application/json\n",
            },
        }
    )
    return resolve_options(
        provider, lambda ns, name: secret if (ns, name) == ("apps", "tempo-auth") else None
    )


@pytest.fixture
async def http() -> AsyncIterator[OutboundHTTP]:
    client = OutboundHTTP(FAST)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def test_span_is_exported_as_otlp_protobuf_like_flux(http: OutboundHTTP) -> None:
    collector = Collector()
    async with CaptureServer() as srv:
        srv.on("POST", "/v1/traces$", collector)
        # Like otlptracehttp.WithEndpointURL, only scheme, host and path of the address are used.
        notifier = create_notifier(provider_options(f"{srv.url}/v1/traces?debug=1"))
        before = time.time_ns()
        await notifier.post(event(), DeliveryContext(http=http, alert=the_alert()))
        after = time.time_ns()

    [req] = srv.requests
    assert (req.method, req.raw_path) == ("POST", "/v1/traces")
    assert req.headers.getall("Content-Type") == ["application/x-protobuf"]
    assert req.headers["Authorization"] == "Bearer otel-token"
    assert req.headers["X-Scope-OrgID"] == "platform"

    export, span = collector.only_span()
    resource_spans = export.resource_spans[0]
    assert resource_spans.schema_url == "https://opentelemetry.io/schemas/1.34.0"
    assert [(a.key, a.value.string_value) for a in resource_spans.resource.attributes] == [
        ("service.instance.id", ALERT_UID),
        ("service.name", "apps/deployments"),
        ("service.namespace", "apps"),
    ]
    scope_spans = resource_spans.scope_spans[0]
    assert (scope_spans.scope.name, scope_spans.scope.version, scope_spans.schema_url) == (
        "flux:notification-controller",
        "",
        "",
    )

    assert span.trace_id == hashlib.sha256(f"{ALERT_UID}:{REVISION}".encode()).digest()[:16]
    assert len(span.span_id) == 8
    assert span.span_id != bytes(8)
    assert span.parent_span_id == b""  # the remote parent context carries no span id
    assert span.trace_state == ""
    assert span.flags == 0x301  # sampled | context-has-is-remote | context-is-remote
    assert span.name == "Kustomization: flux-system/podinfo"
    assert span.kind == Span.SPAN_KIND_INTERNAL
    assert span.start_time_unix_nano == 1_772_360_430 * 10**9  # 2026-03-01T10:20:30Z
    assert before <= span.end_time_unix_nano <= after
    assert [(a.key, a.value.string_value) for a in span.attributes] == [
        ("object.uid", "c1d2e3f4-0000-4000-8000-000000000001"),
        ("object.kind", "Kustomization"),
        ("object.name", "podinfo"),
        ("object.namespace", "flux-system"),
        ("env", "prod"),
        ("revision", REVISION),
    ]
    assert span.dropped_attributes_count == 0
    assert (span.status.code, span.status.message) == (
        Status.STATUS_CODE_ERROR,
        "health check failed after 30s",
    )
    assert (list(span.events), list(span.links)) == ([], [])


async def test_info_events_are_ok_and_share_the_revision_trace(http: OutboundHTTP) -> None:
    collector = Collector()
    async with CaptureServer() as srv:
        srv.on("POST", "/v1/traces$", collector)
        notifier = create_notifier(provider_options(f"{srv.url}/v1/traces"))
        ctx = DeliveryContext(http=http, alert=the_alert())
        source = event(
            involvedObject={"kind": "GitRepository", "namespace": "flux-system", "name": "podinfo"},
            severity="info",
            reason="NewArtifact",
        )
        await notifier.post(source, ctx)
        _, first = collector.only_span()
        await notifier.post(event(severity="info", reason="ReconciliationSucceeded"), ctx)
        _, second = collector.only_span()
    # The SDK keeps a status description for errors only.
    assert (first.status.code, first.status.message) == (Status.STATUS_CODE_OK, "")
    assert first.trace_id == second.trace_id  # one trace per Alert and revision
    assert first.span_id != second.span_id
    assert first.flags == second.flags == 0x301


def test_attribute_rules_follow_the_go_sdk() -> None:
    """Empty keys dropped; a repeated key keeps its first position with the last value; 128 at most."""
    crowded = {f"k{i:03d}": str(i) for i in range(SPAN_ATTRIBUTE_COUNT_LIMIT)}
    crowded.update({"": "no key", "object.kind": "Overridden"})
    attributes, dropped = span_attributes(event(metadata=crowded))
    assert len(attributes) == SPAN_ATTRIBUTE_COUNT_LIMIT
    assert [(a.key, a.value.string_value) for a in attributes[:2]] == [
        ("object.uid", "c1d2e3f4-0000-4000-8000-000000000001"),
        ("object.kind", "Overridden"),
    ]
    assert attributes[-1].key == "k123"
    assert dropped == 1 + 4  # the empty key and k124..k127


def test_a_missing_timestamp_starts_the_span_when_it_is_sent() -> None:
    trace = build_trace(event(timestamp=None), the_alert(), span_id=b"\x01" * 8, end_ns=1_800_000_000 * 10**9)
    span = trace.resource_spans[0].scope_spans[0].spans[0]
    assert span.start_time_unix_nano == span.end_time_unix_nano == 1_800_000_000 * 10**9

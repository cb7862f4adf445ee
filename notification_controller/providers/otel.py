"""``otel``: one OpenTelemetry span per event, exported over OTLP/HTTP protobuf (reference §4.1, §4.4).

Flux builds the span with the OpenTelemetry Go SDK and exports it with ``otlptracehttp``; some OTLP
backends (Elastic APM, Seq) accept only that protobuf encoding, so we send the same bytes:
``POST`` of a binary ``ExportTraceServiceRequest`` with ``Content-Type: application/x-protobuf``, built
with the ``opentelemetry-proto`` messages. What the Go SDK puts in it, field by field:

* resource: ``service.instance.id = <alert UID>``, ``service.name = <alertNs>/<alertName>``,
  ``service.namespace = <alertNs>`` (an attribute set: sorted by key), schema URL of semconv 1.34.0;
* scope ``flux:notification-controller`` (no version, no schema URL);
* one span named ``<Kind>: <ns>/<name>``, kind INTERNAL, starting at the event timestamp (now when it
  has none) and ending when sent; attributes ``object.uid/kind/name/namespace`` then every metadata entry
  (sorted here; Go's map order is random). As the SDK does, an attribute with an empty key is dropped, a
  repeated key keeps its first position and its last value, and beyond 128 attributes the rest are
  dropped, all counted in ``dropped_attributes_count``;
* status Error(message) for ``error`` events, else Ok (no message: the SDK keeps it for errors only);
* the trace id is the first 16 bytes of SHA-256(``<alertUID>:<revision>``), the revision being
  ``<app-version>@<oci-digest>`` when both metadata keys exist, else ``revision``, else ``unknown``: every
  event of one Alert about one revision lands in the same trace. Flux starts the span under a remote
  parent context carrying that trace id and no span id, so there is no parent span id and the flags are
  sampled | has-is-remote | is-remote (``0x301``); the span id is random. (Flux distinguishes source
  kinds as "root spans" in its code, but both branches produce the same span on the wire.)

``HelmRepository`` events are skipped (not a deployment source).

An Alert's ``spec.template`` message (issue 15) adds the attribute ``flux.message`` and, for ``error``
events, becomes the status message; the span name keeps identifying the object (no title).

Endpoint: like ``otlptracehttp.WithEndpointURL``, only the scheme, host and path of the address are used
(the query string and any userinfo are dropped); give the full traces path, e.g.
``https://collector:4318/v1/traces``.

Auth (Flux's rules, quirks included): the Secret's ``headers`` are sent; only when there are headers and
none is ``Authorization``, one is added: ``Bearer <token or password>`` without a username, else
``Basic base64(username:<token or password>)``. ``Content-Type`` is always the exporter's, whatever the
headers say. With a proxy and both a username and a token/password, the proxy URL carries them as userinfo.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import ClassVar
from urllib.parse import quote, urlsplit, urlunsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, SpanFlags, Status

from ..api.alert import Alert
from ..api.event import MD_COMMIT_STATUS, MD_COMMIT_STATUS_UPDATE, MD_REVISION, Event
from ..api.provider import ProviderType
from ..errors import FailureReason, PermanentDeliveryError
from ..outbound import OutboundRequest
from .base import DeliveryContext, ProviderOptions
from .common import Caller, token_or_password
from .validation import require_url

CONTENT_TYPE = "application/x-protobuf"
SCOPE = "flux:notification-controller"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.34.0"
SPAN_ATTRIBUTE_COUNT_LIMIT = 128  # the Go SDK's default span limit
TRACE_FLAG_SAMPLED = 0x01
SPAN_FLAGS = (
    TRACE_FLAG_SAMPLED
    | SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


def trace_revision(metadata: Mapping[str, str]) -> str:
    if "oci-digest" in metadata and "app-version" in metadata:
        return f"{metadata['app-version']}@{metadata['oci-digest']}"
    return metadata.get(MD_REVISION, "unknown")


def trace_id(alert_uid: str, revision: str) -> str:
    """Hex of the first 16 bytes of SHA-256(``<alertUID>:<revision>``)."""
    return (
        hashlib.sha256(f"{alert_uid}:{revision}".encode("utf-8", errors="surrogateescape"))
        .digest()[:16]
        .hex()
    )


def otel_endpoint(address: str) -> str:
    """``otlptracehttp.WithEndpointURL``: scheme, host and path only."""
    parts = urlsplit(require_url(address))
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def otel_headers(opts: ProviderOptions) -> dict[str, str]:
    custom = dict(opts.headers)
    if custom and not custom.get("Authorization"):
        secret = token_or_password(opts)
        if not opts.username:
            custom["Authorization"] = f"Bearer {secret}"
        elif secret:
            raw = f"{opts.username}:{secret}".encode("utf-8", errors="surrogateescape")
            custom["Authorization"] = "Basic " + base64.b64encode(raw).decode("ascii")
    # The exporter sets Content-Type after the configured headers: it always wins.
    headers = {k: v for k, v in custom.items() if k.lower() != "content-type"}
    headers["Content-Type"] = CONTENT_TYPE
    return headers


def otel_proxy(opts: ProviderOptions) -> str | None:
    if not opts.proxy:
        return None
    proxy = opts.proxy.reveal()
    secret = token_or_password(opts)
    if opts.username and secret:
        parts = urlsplit(proxy)
        host = parts.netloc.rpartition("@")[2]
        userinfo = f"{quote(opts.username, safe='')}:{quote(secret, safe='')}"
        proxy = urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))
    return proxy


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def span_attributes(event: Event, text: str | None = None) -> tuple[list[KeyValue], int]:
    """The span's attributes and how many were dropped, with the Go SDK's rules (see the docstring).
    ``text``: an Alert template's message, as the last attribute ``flux.message``."""
    obj = event.involved_object
    pairs: Iterable[tuple[str, str]] = [
        ("object.uid", obj.uid),
        ("object.kind", obj.kind),
        ("object.name", obj.name),
        ("object.namespace", obj.namespace),
        *sorted(event.metadata.items()),
        *((("flux.message", text),) if text is not None else ()),
    ]
    kept: dict[str, str] = {}  # a dict keeps the first position and takes the last value
    dropped = 0
    for name, value in pairs:  # attribute names, not credentials
        if name and (name in kept or len(kept) < SPAN_ATTRIBUTE_COUNT_LIMIT):
            kept[name] = value
        else:
            dropped += 1
    return [_kv(k, v) for k, v in kept.items()], dropped


def start_time_ns(event: Event, now_ns: int) -> int:
    """``trace.WithTimestamp(event.Timestamp)``: a zero time means now; before 1970 clamps to 0."""
    if event.timestamp is None or event.timestamp == _GO_ZERO_TIME:
        return now_ns
    return max(0, (event.timestamp - _EPOCH) // timedelta(microseconds=1) * 1000)


def build_trace(
    event: Event, alert: Alert, *, span_id: bytes, end_ns: int, text: str | None = None
) -> ExportTraceServiceRequest:
    """The ``ExportTraceServiceRequest`` carrying the one span of ``event`` (pure). ``text``: a template's
    message, in the ``flux.message`` attribute and (error events) the span status."""
    obj = event.involved_object
    meta = alert.metadata
    attributes, dropped = span_attributes(event, text)
    status = (
        Status(code=Status.STATUS_CODE_ERROR, message=event.message if text is None else text)
        if event.severity == "error"
        else Status(code=Status.STATUS_CODE_OK)
    )
    span = Span(
        trace_id=bytes.fromhex(trace_id(meta.uid, trace_revision(event.metadata))),
        span_id=span_id,
        flags=SPAN_FLAGS,
        name=f"{obj.kind}: {obj.namespace}/{obj.name}",
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_time_ns(event, end_ns),
        end_time_unix_nano=max(0, end_ns),
        attributes=attributes,
        dropped_attributes_count=dropped,
        status=status,
    )
    resource = Resource(
        attributes=[  # an attribute.Set: sorted by key
            _kv("service.instance.id", meta.uid),
            _kv("service.name", f"{meta.namespace}/{meta.name}"),
            _kv("service.namespace", meta.namespace),
        ]
    )
    scope_spans = ScopeSpans(scope=InstrumentationScope(name=SCOPE), spans=[span])
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope_spans], schema_url=SCHEMA_URL)]
    )


class OTELNotifier:
    type: ClassVar[ProviderType] = ProviderType.OTEL
    uses_proxy: ClassVar[bool] = True
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.url = otel_endpoint(opts.address)
        self.headers = otel_headers(opts)
        self.proxy = otel_proxy(opts)

    def should_send(self, event: Event) -> bool:
        if event.metadata.get(MD_COMMIT_STATUS) == MD_COMMIT_STATUS_UPDATE:
            return False
        return event.involved_object.kind != "HelmRepository"

    def build_request(
        self, event: Event, alert: Alert, *, span_id: bytes, end_ns: int, text: str | None = None
    ) -> OutboundRequest:
        trace = build_trace(event, alert, span_id=span_id, end_ns=end_ns, text=text)
        body = trace.SerializeToString(deterministic=True)
        return OutboundRequest("POST", self.url, self.headers, body)

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        if not self.should_send(event):
            return
        if ctx.alert is None:
            raise PermanentDeliveryError(
                "alert metadata not found in context", reason="internal", failure=FailureReason.INTERNAL
            )
        template = ctx.template
        request = self.build_request(
            event,
            ctx.alert,
            span_id=os.urandom(8),
            end_ns=time.time_ns(),
            text=template.text if template is not None else None,
        )
        call = Caller(ctx, self.opts)
        if self.proxy:
            call.add_mask(self.proxy)
        await call.ctx.http.send(
            request,
            timeout=self.opts.timeout,
            proxy=self.proxy,
            tls=self.opts.tls,
            masks=call.masks,
        )

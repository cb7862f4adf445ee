"""``otel``: one OpenTelemetry span per event, exported over OTLP/HTTP (reference §4.1, §4.4).

The span is named ``<Kind>: <ns>/<name>``, starts at the event timestamp and ends when sent; its attributes
are ``object.uid/kind/name/namespace`` plus every metadata entry; its status is Error(message) for
``error`` events, else Ok. The trace id is the first 16 bytes of SHA-256(``<alertUID>:<revision>``), with the
revision ``<app-version>@<oci-digest>`` when both metadata keys exist, else ``revision``, else ``unknown``:
every event of one Alert about one revision lands in the same trace. The resource says who sent it:
``service.name = <alertNs>/<alertName>``, ``service.namespace``, ``service.instance.id = <alert UID>``; the
scope is ``flux:notification-controller``. ``HelmRepository`` events are skipped (not a deployment source).

Auth (Flux's rules, quirks included): the Secret's ``headers`` are sent; only when there are headers and
none is ``Authorization``, one is added: ``Bearer <token or password>`` without a username, else
``Basic base64(username:<token or password>)``. With a proxy and both a username and a token/password,
the proxy URL carries them as userinfo.

Deviation: Flux's exporter sends protobuf (``application/x-protobuf``); we send the OTLP/HTTP **JSON**
encoding (``application/json``, hex trace/span ids), which every OTLP/HTTP receiver accepts as well.
The address is the full traces endpoint (e.g. ``https://collector:4318/v1/traces``), used as given.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import quote, urlsplit, urlunsplit

from ..api.alert import Alert
from ..api.event import MD_COMMIT_STATUS, MD_COMMIT_STATUS_UPDATE, MD_REVISION, Event
from ..api.provider import ProviderType
from ..core.gojson import GoStruct
from ..errors import PermanentDeliveryError
from .base import DeliveryContext, OutboundRequest, ProviderOptions
from .gitcommon import Caller, go_json, token_or_password
from .registry import register
from .validation import require_url

SCOPE = "flux:notification-controller"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.34.0"
SPAN_KIND_INTERNAL = 1
STATUS_OK = 1
STATUS_ERROR = 2
SOURCE_KINDS = frozenset({"GitRepository", "HelmChart", "OCIRepository", "Bucket"})


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


def _attr(key: str, value: str) -> GoStruct:
    return GoStruct(key=key, value=GoStruct(stringValue=value))


def otel_headers(opts: ProviderOptions) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    custom = dict(opts.headers)
    if custom and not custom.get("Authorization"):
        secret = token_or_password(opts)
        if not opts.username:
            custom["Authorization"] = f"Bearer {secret}"
        elif secret:
            raw = f"{opts.username}:{secret}".encode("utf-8", errors="surrogateescape")
            custom["Authorization"] = "Basic " + base64.b64encode(raw).decode("ascii")
    headers.update(custom)
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


def build_trace(event: Event, alert: Alert, *, span_id: str, end_ns: int) -> GoStruct:
    """The ``ExportTraceServiceRequest`` (OTLP JSON) carrying the one span of ``event`` (pure)."""
    obj = event.involved_object
    meta = alert.metadata
    start_ns = int(event.timestamp.timestamp()) * 1_000_000_000 if event.timestamp else end_ns
    attributes = [
        _attr("object.uid", obj.uid),
        _attr("object.kind", obj.kind),
        _attr("object.name", obj.name),
        _attr("object.namespace", obj.namespace),
    ]
    attributes.extend(_attr(k, v) for k, v in sorted(event.metadata.items()))
    status = (
        GoStruct(code=STATUS_ERROR, message=event.message)
        if event.severity == "error"
        else GoStruct(code=STATUS_OK)
    )
    span = GoStruct(
        traceId=trace_id(meta.uid, trace_revision(event.metadata)),
        spanId=span_id,
        name=f"{obj.kind}: {obj.namespace}/{obj.name}",
        kind=SPAN_KIND_INTERNAL,
        startTimeUnixNano=str(start_ns),
        endTimeUnixNano=str(max(end_ns, start_ns)),
        attributes=attributes,
        status=status,
    )
    resource = GoStruct(
        attributes=[
            _attr("service.name", f"{meta.namespace}/{meta.name}"),
            _attr("service.namespace", meta.namespace),
            _attr("service.instance.id", meta.uid),
        ]
    )
    scope_spans = GoStruct(scope=GoStruct(name=SCOPE), spans=[span])
    return GoStruct(
        resourceSpans=[GoStruct(resource=resource, scopeSpans=[scope_spans], schemaUrl=SCHEMA_URL)]
    )


@register
class OTELNotifier:
    type: ClassVar[ProviderType] = ProviderType.OTEL
    uses_proxy: ClassVar[bool] = True
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.url = require_url(opts.address)
        self.headers = otel_headers(opts)
        self.proxy = otel_proxy(opts)

    def should_send(self, event: Event) -> bool:
        if event.metadata.get(MD_COMMIT_STATUS) == MD_COMMIT_STATUS_UPDATE:
            return False
        return event.involved_object.kind != "HelmRepository"

    def build_request(self, event: Event, alert: Alert, *, span_id: str, end_ns: int) -> OutboundRequest:
        body = go_json(build_trace(event, alert, span_id=span_id, end_ns=end_ns))
        return OutboundRequest("POST", self.url, self.headers, body)

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        if not self.should_send(event):
            return
        if ctx.alert is None:
            raise PermanentDeliveryError("alert metadata not found in context", reason="internal")
        request = self.build_request(event, ctx.alert, span_id=os.urandom(8).hex(), end_ns=time.time_ns())
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

"""``cloudevents`` (beyond Flux): every notification as a CloudEvents 1.0 event over HTTP, a CDEvent where one fits.

Why: CloudEvents is what event routers (Knative Eventing, Argo Events, Azure Event Grid, Tekton triggers) and
CD observability tools (Keptn, DevLake, cdviz) consume; Flux's request #395 has been open since 2022. A
``generic`` Provider sends Flux's event with no envelope, so every consumer writes an adapter.

What goes out (docs/providers/cloudevents.md has the table and an example):

* **Binary content mode** (the default, ``spec.channel`` empty or ``binary``): the attributes as ``ce-*``
  headers, percent-encoded as the HTTP binding §3.1.3.2 says, ``Content-Type: application/json``, the data as
  the body. **Structured mode** (``spec.channel: structured``): one JSON object with the attributes and
  ``data``, ``Content-Type: application/cloudevents+json``. ``channel`` is the one existing Provider field
  that names where a message goes and means nothing else for this type; no CRD field was added.
* ``type``: a **CDEvent** (spec v0.4.1, the version Flux's ``cdevents`` receiver reads) for the outcomes that
  have one — a HelmRelease installed, upgraded, rolled back or uninstalled → ``service.deployed``,
  ``service.upgraded``, ``service.rolledback``, ``service.removed``; a Kustomization reconciled →
  ``environment.modified`` — when the event has a revision and a timestamp (``CDEVENT_TYPES``). The data
  is then the CDEvent (``context`` + ``subject``, Flux's event as ``customData``): our ``cdevents`` receiver
  (``receivers/cdevents.py: validate_cdevent``) accepts it, and all five shapes passed the spec's v0.4.1 JSON
  schemas (the ones Flux's receiver applies through sdk-go; checked with ``jsonschema`` 4.26 when this module
  was written, the schemas are not vendored). Every other
  event is ``io.fluxcd.event.v1.<severity>`` with Flux's event JSON (as ``generic`` sends it) as data.
* ``source``: the involved object's API path (``/apis/<group>/<version>/namespaces/<ns>/<resource>/<name>``,
  the resource guessed from the kind as Kubernetes' ``meta.UnsafeGuessKindToResource`` does); ``subject``:
  the CDEvent's subject id (the binding requires it), else the event's revision; ``time``: the event's.
* ``id``: the same for every attempt of one notification and different between notifications, so a receiver
  can drop redeliveries: with a durable store the notification's id (the outbox's ``Idempotency-Key``, the id
  ``history`` shows), else a digest of the Alert, the Provider and the event sent.
* A Provider ``bodyTemplate`` replaces the data; the attributes stay. A Secret ``headers`` entry named
  ``ce-<name>`` is an extension attribute (a header in binary mode, a member in structured mode); one that
  would replace an attribute this type sets is refused when the Provider is built.

Bounded: ``source`` and ``subject`` are cut to ``MAX_ATTRIBUTE`` characters (a digest of the whole keeps
them distinct), so an event's fields cannot make a header a receiver refuses; the data is the event, whose
size the event server caps. Checked against the CloudEvents SDK's parser (``cloudevents`` 2.x,
``tests/providers/test_cloudevents.py``) in both modes, and against the ``cdevents`` receiver end to end
(``tests/integration/test_cloudevents_roundtrip.py``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar
from urllib.parse import quote

import orjson

from ..api.event import GO_ZERO_TIME, MD_REVISION, SEVERITY_ERROR, SEVERITY_TRACE, Event, ObjectReference
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..lib.clock import rfc3339
from ..outbound import IDEMPOTENCY_KEY, OutboundRequest, path_segment
from .base import DeliveryContext, HTTPNotifier, ProviderOptions, obj_name
from .message import Message, with_text
from .validation import require_url

SPEC_VERSION = "1.0"
CDEVENTS_SPEC_VERSION = "0.4.1"
JSON = "application/json"
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
FLUX_TYPE_PREFIX = "io.fluxcd.event.v1."
ENVIRONMENT_KEY = "environment"
"""Event metadata key naming the environment of a CDEvent (an Alert's ``spec.eventMetadata.environment``);
the involved object's namespace when absent."""
MAX_ATTRIBUTE = 512
"""Longest ``source``/``subject`` in characters: percent-encoded, it stays under a server's 8 KiB field."""

BINARY, STRUCTURED = "binary", "structured"

HELM = "helm.toolkit.fluxcd.io"
KUSTOMIZE = "kustomize.toolkit.fluxcd.io"

CDEVENT_TYPES: Mapping[tuple[str, str, str], str] = MappingProxyType(
    {
        (HELM, "HelmRelease", "InstallSucceeded"): "dev.cdevents.service.deployed.0.2.0",
        (HELM, "HelmRelease", "UpgradeSucceeded"): "dev.cdevents.service.upgraded.0.2.0",
        (HELM, "HelmRelease", "RollbackSucceeded"): "dev.cdevents.service.rolledback.0.2.0",
        (HELM, "HelmRelease", "UninstallSucceeded"): "dev.cdevents.service.removed.0.2.0",
        (KUSTOMIZE, "Kustomization", "ReconciliationSucceeded"): "dev.cdevents.environment.modified.0.2.0",
    }
)
"""(API group, kind, reason) → CDEvents v0.4.1 type. Anything else is a Flux type (``flux_type``)."""

# The attributes this type sets: a Secret header may not replace them (``ce-`` + name, or Content-Type).
CONTEXT_ATTRIBUTES = frozenset(
    {"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema"}
)
RESERVED_MEMBERS = CONTEXT_ATTRIBUTES | {"data", "data_base64"}
_EXTENSION_NAME = re.compile(r"[a-z0-9]{1,20}")
# HTTP binding §3.1.3.2: printable ASCII stays, except space, '"' and '%'; everything else is %-encoded UTF-8.
_HEADER_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in '"%')
_HEADER_PLAIN = re.compile(
    r"[!#$&-~]*"
)  # _HEADER_SAFE as a class: such a value needs no quote() (~1 µs each)
_SEGMENT_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")  # what every path escape leaves alone (Kubernetes names)


@dataclass(frozen=True)
class CloudEvent:
    """One event: its context attributes (decoded values, insertion order kept) and its data (JSON bytes)."""

    attributes: Mapping[str, str]
    data: bytes

    @property
    def type(self) -> str:
        return self.attributes["type"]


def content_mode(channel: str) -> str:
    """``spec.channel``: ``binary`` (default) or ``structured``; anything else names the field."""
    mode = channel.strip().lower() or BINARY
    if mode not in (BINARY, STRUCTURED):
        shown = channel if len(channel) <= 64 else channel[:64] + "…"
        raise ProviderConfigError(
            f"invalid spec.channel {shown!r}: the cloudevents content mode is 'binary' (default) or 'structured'"
        )
    return mode


def extension_headers(headers: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The Secret's ``headers`` split into (extension attributes by name, other headers); refuses a header
    that would replace what this type sets, or an extension name CloudEvents does not allow."""
    extensions: dict[str, str] = {}
    others: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower == "content-type":
            raise ProviderConfigError(
                "invalid header 'Content-Type' in the Secret's headers: the cloudevents provider sets it"
            )
        if not lower.startswith("ce-"):
            others[name] = value
            continue
        attribute = lower[3:]
        if attribute in RESERVED_MEMBERS:
            raise ProviderConfigError(
                f"invalid header {name!r} in the Secret's headers: the cloudevents provider sets {attribute!r}"
            )
        if _EXTENSION_NAME.fullmatch(attribute) is None:
            raise ProviderConfigError(
                f"invalid header {name[:64]!r} in the Secret's headers: a CloudEvents extension name is 1 to 20 "
                "lower-case letters or digits"
            )
        extensions[attribute] = value
    return extensions, others


def bounded(text: str, limit: int = MAX_ATTRIBUTE) -> str:
    """``text`` when short enough, else its head and a digest of the whole (distinct values stay distinct)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[: limit - 17]}~{digest}"


def resource_of(kind: str) -> str:
    """Kubernetes' ``meta.UnsafeGuessKindToResource``: HelmRelease → helmreleases, GitRepository →
    gitrepositories, ImagePolicy → imagepolicies, Bucket → buckets."""
    singular = kind.lower()
    if not singular or singular.endswith("endpoints"):
        return singular
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def source_of(obj: ObjectReference) -> str:
    """The involved object's API path, a URI-reference: ``/apis/<group>/<version>/namespaces/<ns>/<resource>/
    <name>`` (``/api/v1/...`` for the core group; no apiVersion: the path from ``namespaces`` on)."""
    api = obj.api_version
    prefix = ("/apis/" if "/" in api else "/api/") + "/".join(map(_segment, api.split("/"))) if api else ""
    namespace = f"/namespaces/{_segment(obj.namespace)}" if obj.namespace else ""
    return bounded(f"{prefix}{namespace}/{_segment(resource_of(obj.kind))}/{_segment(obj.name)}")


def artifact_id(obj: ObjectReference, revision: str) -> str:
    """A package URL for what the object deployed: ``pkg:generic/<namespace>/<name>@<revision>`` (purl
    percent-encodes ``@`` and ``:`` of a Flux revision such as ``main@sha1:…``)."""
    parts = [_purl_part(p) for p in (obj.namespace, obj.name) if p]
    return f"pkg:generic/{'/'.join(parts)}@{_purl_part(revision)}"


def flux_type(event: Event) -> str:
    severity = event.severity if event.severity in (SEVERITY_ERROR, SEVERITY_TRACE) else "info"
    return FLUX_TYPE_PREFIX + severity


def cdevent_type(event: Event) -> str | None:
    """The CDEvents type of ``event`` (``CDEVENT_TYPES``), or None: no mapping, no revision or no time."""
    obj = event.involved_object
    ce_type = CDEVENT_TYPES.get((obj.group, obj.kind, event.reason))
    if ce_type is None or not event.metadata.get(MD_REVISION) or _time(event) is None:
        return None
    return ce_type


def _time(event: Event) -> str | None:
    ts = event.timestamp
    return rfc3339(ts) if ts is not None and ts != GO_ZERO_TIME else None


def notification_id(alert: str, provider: str, sent: bytes) -> str:
    """A digest of what identifies one notification: the Alert, the Provider and the bytes of the event."""
    h = hashlib.sha256()
    for part in (alert.encode(), provider.encode(), sent):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:32]


def cdevent(event: Event, ce_type: str, event_id: str, source: str, flux_json: bytes) -> tuple[str, bytes]:
    """(subject id, the CDEvent JSON): ``context`` + ``subject`` as spec v0.4.1's schema for ``ce_type``
    wants them, Flux's event as ``customData``."""
    obj = event.involved_object
    environment = bounded(event.metadata.get(ENVIRONMENT_KEY) or obj.namespace or "default")
    subject_kind = ce_type.split(".")[2]
    if subject_kind == "environment":
        subject_id = environment
        subject = {"id": subject_id, "type": "environment", "content": {"name": environment}}
    else:
        subject_id = bounded(obj_name(event))
        content: dict[str, object] = {"environment": {"id": environment}}
        if ce_type != CDEVENT_TYPES[(HELM, "HelmRelease", "UninstallSucceeded")]:
            content["artifactId"] = bounded(artifact_id(obj, event.metadata[MD_REVISION]))
        subject = {"id": subject_id, "type": "service", "content": content}
    body = {
        "context": {
            "version": CDEVENTS_SPEC_VERSION,
            "id": event_id,
            "source": source,
            "type": ce_type,
            "timestamp": _time(event),
        },
        "subject": subject,
        "customData": orjson.Fragment(flux_json),
        "customDataContentType": JSON,
    }
    return subject_id, orjson.dumps(body)


def cloud_event(event: Event, flux_json: bytes, *, event_id: str, body: bytes | None = None) -> CloudEvent:
    """The CloudEvent for ``event`` (pure): a CDEvent where ``CDEVENT_TYPES`` maps it, Flux's event otherwise.
    ``flux_json``: Flux's event as ``generic`` sends it (a template's text as its message); ``body``: a rendered
    ``bodyTemplate``, the data instead."""
    source = source_of(event.involved_object)
    ce_type = cdevent_type(event)
    if ce_type is not None:
        subject, data = cdevent(event, ce_type, event_id, source, flux_json)
    else:
        ce_type, data = flux_type(event), flux_json
        subject = bounded(event.metadata.get(MD_REVISION, ""))
    attributes = {"specversion": SPEC_VERSION, "id": event_id, "source": source, "type": ce_type}
    if subject:
        attributes["subject"] = subject
    if (time := _time(event)) is not None:
        attributes["time"] = time
    return CloudEvent(attributes, body if body is not None else data)


def header_value(value: str) -> str:
    """An attribute as an HTTP header value (HTTP binding §3.1.3.2)."""
    return value if _HEADER_PLAIN.fullmatch(value) else quote(value, safe=_HEADER_SAFE)


def _segment(text: str) -> str:
    return text if _SEGMENT_PLAIN.fullmatch(text) else path_segment(text)


def _purl_part(text: str) -> str:
    return text if _SEGMENT_PLAIN.fullmatch(text) else quote(text, safe="")


def binary_request(ce: CloudEvent, extensions: Mapping[str, str]) -> tuple[dict[str, str], bytes]:
    headers = {"Content-Type": JSON}
    for name, value in ce.attributes.items():
        headers["ce-" + name] = header_value(value)
    for name, value in extensions.items():  # the Secret's value is the attribute's: encoded like ours
        headers["ce-" + name] = header_value(value)
    return headers, ce.data


def structured_request(ce: CloudEvent, extensions: Mapping[str, str]) -> tuple[dict[str, str], bytes]:
    members: dict[str, object] = {**ce.attributes, **extensions, "datacontenttype": JSON}
    try:
        orjson.loads(ce.data)
        members["data"] = orjson.Fragment(ce.data)
    except orjson.JSONDecodeError:  # a body that is not JSON (never from the template stage): as a string
        members["datacontenttype"] = "text/plain; charset=utf-8"
        members["data"] = ce.data.decode("utf-8", "replace")
    return {"Content-Type": STRUCTURED_CONTENT_TYPE}, orjson.dumps(members)


class CloudEventsNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.CLOUDEVENTS
    template_only: ClassVar[bool] = True
    propagates_trace: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address)
        self.mode = content_mode(opts.channel)
        self.extensions, self.headers = extension_headers(opts.headers)
        self.provider_key = f"{opts.namespace}/{opts.name}"
        # An extension (``ce-cluster: apps``) is a label, not a credential: masked, it would blank the word
        # out of every error text ("HelmRelease/***/podinfo"). The other headers and the Secret stay masked.
        public = set(self.extensions.values()) - set(self.headers.values())
        self._masks = [m for m in opts.masks() if m not in public]

    def masks(self) -> Sequence[str]:
        return self._masks

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        alert = ctx.alert
        request = self.build_request(
            event,
            self.message_for(ctx.message, ctx.templated),
            body=ctx.body,
            alert=f"{alert.metadata.namespace}/{alert.metadata.name}" if alert is not None else "",
            event_id=IDEMPOTENCY_KEY.get(),  # the durable outbox's notification id, the same on every attempt
        )
        await self.send(request, ctx)

    def build_request(
        self,
        event: Event,
        message: Message | None = None,
        *,
        body: bytes | None = None,
        alert: str = "",
        event_id: str = "",
    ) -> OutboundRequest:
        """The CloudEvent for ``event`` in this Provider's content mode. ``event_id``: the notification's id
        when the pipeline has one, else a digest (``notification_id``) of what is sent."""
        flux_json = with_text(event, message).to_go_json()
        if not event_id:
            event_id = notification_id(alert, self.provider_key, body if body is not None else flux_json)
        ce = cloud_event(event, flux_json, event_id=event_id, body=body)
        if self.mode == STRUCTURED:
            headers, payload = structured_request(ce, self.extensions)
        else:
            headers, payload = binary_request(ce, self.extensions)
        return OutboundRequest("POST", self.opts.address, {**self.headers, **headers}, payload)

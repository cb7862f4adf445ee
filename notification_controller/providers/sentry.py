"""``sentry``: events and transactions to Sentry, without the Sentry SDK (reference §4.1, §4.5).

The address is the project DSN ``https://<public key>@<host>[/<path>]/<project id>``; ``spec.channel``
is the Sentry environment. Each Flux event becomes one item of a Sentry envelope sent to
``https://<host>[/<path>]/api/<project id>/envelope/`` with
``X-Sentry-Auth: Sentry sentry_version=7, sentry_key=<key>, sentry_client=notification-controller/0.1``:

* severity ``info`` → a transaction named ``"<Kind>: <namespace>/<name>"`` whose start and end are the
  event time, tagged ``flux_involved_object_kind|namespace|name``, ``flux_reporting_controller``,
  ``flux_reporting_instance``, ``flux_reason`` and every metadata entry;
* severity ``error`` → an error event (level ``error``, ``server_name`` = reporting controller, the same
  transaction name, the message, ``contexts.metadata`` = the metadata);
* other severities → nothing is sent (Flux captures a nil event).

Deviations from Flux, which uses ``sentry-go`` (§4.5): no SDK dependency; the request goes through the
shared outbound path, so delivery failures are retried and reported as errors (Flux's ``Post`` never
fails and the SDK drops events silently); event, trace and span ids are derived from a SHA-256 of the
provider UID and the event bytes instead of random, so a retried delivery is de-duplicated by Sentry.
As in Flux, TLS settings (``certSecretRef``) are honoured and proxies are not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from ..api.event import SEVERITY_ERROR, SEVERITY_INFO, Event
from ..api.provider import ProviderType
from ..core.redact import SecretValue
from ..errors import ProviderConfigError
from ..lib.clock import rfc3339
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions
from .message import Message, with_text

SENTRY_CLIENT = "notification-controller/0.1"
SDK_INFO = GoStruct(name="notification-controller", version="0.1")


@dataclass(frozen=True)
class SentryDSN:
    """A parsed DSN. ``key`` is a credential: it never prints."""

    scheme: str
    host: str  # host[:port]
    path: str  # path prefix before the project id, without trailing slash
    project: str
    key: SecretValue

    @property
    def envelope_url(self) -> str:
        return f"{self.scheme}://{self.host}{self.path}/api/{self.project}/envelope/"

    @property
    def auth_header(self) -> str:
        return f"Sentry sentry_version=7, sentry_key={self.key.reveal()}, sentry_client={SENTRY_CLIENT}"


def parse_dsn(dsn: str) -> SentryDSN:
    """Parse a DSN; errors never echo it (it holds the key)."""
    if not dsn:
        raise ProviderConfigError("DSN cannot be empty")
    try:
        parts = urlsplit(dsn)
        port = parts.port
    except ValueError:
        raise ProviderConfigError("invalid Sentry DSN: not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise ProviderConfigError("invalid Sentry DSN: scheme must be http or https")
    if not parts.hostname:
        raise ProviderConfigError("invalid Sentry DSN: empty host")
    if not parts.username:
        raise ProviderConfigError("invalid Sentry DSN: empty public key")
    path = parts.path.rstrip("/")
    prefix, _, project = path.rpartition("/")
    if not project:
        raise ProviderConfigError("invalid Sentry DSN: empty project id")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if port is not None:
        host = f"{host}:{port}"
    return SentryDSN(parts.scheme, host, prefix, project, SecretValue(parts.username))


def event_summary(event: Event) -> str:
    obj = event.involved_object
    return f"{obj.kind}: {obj.namespace}/{obj.name}"


def _ids(provider_uid: str, event: Event) -> tuple[str, str, str]:
    digest = hashlib.sha256(provider_uid.encode() + b"\n" + event.to_go_json()).hexdigest()
    span = hashlib.sha256(b"span\n" + digest.encode()).hexdigest()
    return digest[:32], digest[32:64], span[:16]


def _time(moment: datetime | None) -> str | None:
    return rfc3339(moment) if moment is not None else None


def sentry_item(event: Event, *, environment: str, provider_uid: str) -> tuple[str, GoStruct] | None:
    """The envelope item type and payload for ``event``, or None when Flux would send nothing."""
    event_id, trace_id, span_id = _ids(provider_uid, event)
    when = _time(event.timestamp)
    obj = event.involved_object
    item = GoStruct(event_id=event_id)
    if event.severity == SEVERITY_INFO:
        tags: dict[str, str] = {
            "flux_involved_object_kind": obj.kind,
            "flux_involved_object_namespace": obj.namespace,
            "flux_involved_object_name": obj.name,
            "flux_reporting_controller": event.reporting_controller,
            "flux_reporting_instance": event.reporting_instance,
            "flux_reason": event.reason,
        }
        tags.update(event.metadata)
        item["type"] = "transaction"
        item["platform"] = "other"
        item["transaction"] = event_summary(event)
        item["message"] = event.message
        if environment:
            item["environment"] = environment
        if when is not None:
            item["start_timestamp"] = when
            item["timestamp"] = when
        item["tags"] = tags
        item["contexts"] = {"trace": GoStruct(trace_id=trace_id, span_id=span_id, op="event")}
        item["spans"] = []
        item["sdk"] = SDK_INFO
        return "transaction", item
    if event.severity == SEVERITY_ERROR:
        item["level"] = "error"
        item["platform"] = "other"
        item["server_name"] = event.reporting_controller
        item["transaction"] = event_summary(event)
        item["message"] = event.message
        if environment:
            item["environment"] = environment
        if when is not None:
            item["timestamp"] = when
        item["contexts"] = {"metadata": dict(event.metadata)}
        item["sdk"] = SDK_INFO
        return "event", item
    return None


def envelope(item_type: str, item: Any) -> bytes:
    payload = dumps(item)
    header = dumps(GoStruct(event_id=item["event_id"]))
    item_header = dumps(GoStruct(type=item_type, length=len(payload)))
    return header + b"\n" + item_header + b"\n" + payload + b"\n"


class SentryNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.SENTRY
    uses_proxy: ClassVar[bool] = False
    template_only: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        self.dsn = parse_dsn(opts.address)

    def should_send(self, event: Event) -> bool:
        return event.severity in (SEVERITY_INFO, SEVERITY_ERROR)

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        built = sentry_item(
            with_text(event, message), environment=self.opts.channel, provider_uid=self.opts.uid
        )
        if built is None:
            raise ValueError(f"severity {event.severity!r} is not sent to Sentry (see should_send)")
        item_type, item = built
        headers = {"Content-Type": "application/x-sentry-envelope", "X-Sentry-Auth": self.dsn.auth_header}
        return OutboundRequest("POST", self.dsn.envelope_url, headers, envelope(item_type, item))

    def masks(self) -> Sequence[str]:
        # The DSN key travels in a header: mask it on its own too, not only as part of the DSN.
        return [*self.opts.masks(), self.dsn.key.reveal()]

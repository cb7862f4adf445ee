"""``datadog``: an event through the Datadog API v1 (reference §4.1, §4.5).

``POST <scheme>://<host of address>/api/v1/events`` with ``DD-API-KEY: <token>`` and the
``EventCreateRequest`` the Datadog Go client sends (its ``MarshalJSON`` builds a map, so keys are sorted):
``alert_type`` (``error``/``info``), ``date_happened`` (Unix seconds), ``source_type_name: fluxcd``,
``tags`` (lower-cased ``flux_reporting_controller:``, ``flux_reason:``, ``kube_kind:``, ``kube_name:``,
``kube_namespace:`` then ``key:value`` per metadata entry, sorted by key here), ``text``, ``title``.

Deviations from Flux, which uses the Datadog SDK (§4.5): the request goes through the shared outbound
path, so it gets the same retries as every other provider (the SDK does not retry), and an empty
address means the SDK's default site ``https://api.datadoghq.com``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..lib.gojson import dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions
from .message import Message

DEFAULT_SITE = "https://api.datadoghq.com"
GO_ZERO_UNIX = -62135596800


def datadog_tags(event: Event) -> list[str]:
    obj = event.involved_object
    tags = [
        f"flux_reporting_controller:{event.reporting_controller}",
        f"flux_reason:{event.reason}",
        f"kube_kind:{obj.kind}",
        f"kube_name:{obj.name}",
        f"kube_namespace:{obj.namespace}",
    ]
    tags.extend(f"{k}:{event.metadata[k]}" for k in sorted(event.metadata))
    return [t.lower() for t in tags]


def _unix(moment: datetime | None) -> int:
    return int(moment.timestamp()) if moment is not None else GO_ZERO_UNIX


def datadog_payload(event: Event, message: Message | None = None) -> dict[str, Any]:
    """Flux's event; a template's ``message`` (when given) supplies the title and the text."""
    obj = event.involved_object
    return {
        "title": message.title if message else f"Events from the {obj.kind} {obj.name}/{obj.namespace}",
        "text": message.text if message else event.message,
        "tags": datadog_tags(event),
        "source_type_name": "fluxcd",
        "date_happened": _unix(event.timestamp),
        "alert_type": "error" if event.severity == SEVERITY_ERROR else "info",
    }


class DatadogNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.DATADOG

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        if not opts.token_text:
            raise ProviderConfigError("token cannot be empty")
        base = DEFAULT_SITE
        if opts.address:
            try:
                parts = urlsplit(opts.address)
            except ValueError:
                raise ProviderConfigError("failed to parse address: not a valid URL") from None
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ProviderConfigError("failed to parse address: must be an absolute http or https URL")
            base = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
        self.url = f"{base}/api/v1/events"

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "DD-API-KEY": self.opts.token_text,
        }
        return OutboundRequest("POST", self.url, headers, dumps(datadog_payload(event, message)))

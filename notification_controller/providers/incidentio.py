"""``incident.io``: an alert event for an incident.io HTTP alert source (reference §4.1).

``POST <address>`` (``https://api.incident.io/v2/alert_events/http/<source id>``) with
``Authorization: Bearer <token>`` and ``{"title": "<objName>: <reason>", "status": "firing"|"resolved",
"deduplication_key": <object UID>, "description": <message>, "metadata": {...}}``. Errors fire the
alert, anything else resolves it; the object UID as key makes a recovery resolve the alert its failure
fired. ``metadata`` is the event metadata plus ``severity``, ``reason`` and ``reportingController``.
Events with reason ``Progressing`` are skipped.
"""

from __future__ import annotations

from typing import ClassVar

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url

PROGRESSING = "Progressing"


def incidentio_payload(event: Event, message: Message | None = None) -> GoStruct:
    """Flux's alert; a supplied ``message`` (template, group) gives its title, text and fields."""
    m = message or Message.of(event)
    metadata = dict(m.fields)
    metadata["severity"] = m.severity
    metadata["reason"] = event.reason
    if event.reporting_controller:
        metadata["reportingController"] = event.reporting_controller
    payload = GoStruct(
        title=m.title if message else f"{m.title}: {event.reason}",
        status="firing" if m.severity == SEVERITY_ERROR else "resolved",
        deduplication_key=event.involved_object.uid,
    )
    if m.text:
        payload["description"] = m.text
    payload["metadata"] = metadata
    return payload


class IncidentIONotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.INCIDENT_IO

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="incident.io alert source URL")
        if not opts.token_text:
            raise ProviderConfigError("empty incident.io API token")

    def should_send(self, event: Event) -> bool:
        return event.reason != PROGRESSING

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        headers = json_headers({"Authorization": f"Bearer {self.opts.token_text}"})
        return OutboundRequest("POST", self.opts.address, headers, dumps(incidentio_payload(event, message)))

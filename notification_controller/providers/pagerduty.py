"""``pagerduty``: PagerDuty Events API v2 (reference §4.1).

Only the scheme and host of the address are used: every event is sent to ``<scheme>://<host>/v2/enqueue``
— ``trigger`` with a payload for errors, ``resolve`` (closing any incident open for the object) for
other severities, de-duplicated on the involved object's UID. Info events are additionally sent as a
change event to ``/v2/change/enqueue``. The routing key is ``spec.channel``. Events with reason
``Progressing`` are skipped: PagerDuty wants outcomes, not progress.

The JSON shapes follow ``github.com/PagerDuty/go-pagerduty`` v1.8 field order and ``omitempty`` rules;
``custom_details`` is ``{"message": ..., "metadata": {...}}``, the metadata an object even when empty.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar
from urllib.parse import urlsplit

from ..api.event import SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_TRACE, Event
from ..api.provider import ProviderType
from ..core.redact import redact_url
from ..lib.clock import rfc3339
from ..lib.gojson import GoStruct, dumps
from ..outbound import Budget, OutboundRequest
from .base import DeliveryContext, HTTPNotifier, ProviderOptions, json_headers
from .formatting import format_name_and_description
from .message import Message
from .validation import require_url

PROGRESSING = "Progressing"
GO_ZERO_TIME = "0001-01-01T00:00:00Z"


def pagerduty_severity(severity: str) -> str:
    """Flux's mapping: info → info, trace → info, anything else → error."""
    if severity in (SEVERITY_INFO, SEVERITY_TRACE):
        return "info"
    return "error"


def _timestamp(moment: datetime | None) -> str:
    return rfc3339(moment) if moment is not None else GO_ZERO_TIME


def _details(event: Event, message: Message | None) -> dict[str, object]:
    # Flux's event server always replaces the event's metadata with a (possibly empty) map before any
    # notifier runs, so ``metadata`` is ``{}`` for an event without metadata, never ``null``.
    return {"message": message.text if message else event.message, "metadata": dict(event.metadata)}


def _summary(event: Event, message: Message | None) -> str:
    """Flux's ``<description>: <name>``, or a template's title."""
    if message is not None:
        return message.title
    name, desc = format_name_and_description(event)
    return f"{desc}: {name}"


def v2_event(event: Event, routing_key: str, message: Message | None = None) -> GoStruct:
    out = GoStruct(routing_key=routing_key, event_action="resolve")
    if event.involved_object.uid:
        out["dedup_key"] = event.involved_object.uid
    if event.severity == SEVERITY_ERROR:
        out["event_action"] = "trigger"
        payload = GoStruct(
            summary=_summary(event, message),
            source=f"Flux {event.reporting_controller}",
            severity=pagerduty_severity(event.severity),
            timestamp=_timestamp(event.timestamp),
        )
        if event.involved_object.name:
            payload["component"] = event.involved_object.name
        if event.involved_object.kind:
            payload["group"] = event.involved_object.kind
        payload["custom_details"] = _details(event, message)
        out["payload"] = payload
    return out


def change_event(event: Event, routing_key: str, message: Message | None = None) -> GoStruct:
    payload = GoStruct(summary=_summary(event, message), source=f"Flux {event.reporting_controller}")
    payload["timestamp"] = _timestamp(event.timestamp)
    payload["custom_details"] = _details(event, message)
    return GoStruct(routing_key=routing_key, payload=payload)


class PagerDutyNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.PAGERDUTY

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="PagerDuty endpoint URL")
        parts = urlsplit(opts.address)
        self.endpoint = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"

    def should_send(self, event: Event) -> bool:
        return event.reason != PROGRESSING

    def build_requests(self, event: Event, message: Message | None = None) -> list[OutboundRequest]:
        """The enqueue request, plus the change event for info events (pure); a template's ``message``
        supplies the summary (title) and ``custom_details.message`` (text)."""
        key = self.opts.channel
        requests = [
            OutboundRequest(
                "POST", f"{self.endpoint}/v2/enqueue", json_headers(), dumps(v2_event(event, key, message))
            )
        ]
        if event.severity == SEVERITY_INFO:
            body = dumps(change_event(event, key, message))
            requests.append(
                OutboundRequest("POST", f"{self.endpoint}/v2/change/enqueue", json_headers(), body)
            )
        return requests

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        return self.build_requests(event, message)[0]

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        if not self.should_send(event):
            return
        budget = Budget(self.opts.timeout)  # spec.timeout for both requests, as Flux's context covers both
        for request in self.build_requests(event, ctx.message):
            await ctx.http.send(
                request,
                timeout=budget.remaining(f"request to {redact_url(request.url)}"),
                proxy=self.opts.proxy.reveal() if self.opts.proxy else None,
                tls=self.opts.tls,
                masks=self.opts.masks(),
                check=self.check_response,
            )

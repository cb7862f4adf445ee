"""``opsgenie``: create an Opsgenie alert (reference §4.1).

``POST <address>`` (e.g. ``https://api.opsgenie.com/v2/alerts``) with ``Authorization: GenieKey <token>``
and ``{"message": "<Kind>/<name>", "alias": <id>, "description": <message>, "details": {...}}``.
``details`` is the metadata plus ``severity``; ``alias`` is the first 64 hex characters of
SHA-256(``<providerUID>/<Kind>/<namespace>/<name>/<reason>``), so repeated events of one object and
reason update a single Opsgenie alert instead of opening new ones.
"""

from __future__ import annotations

import hashlib
from typing import ClassVar

from ..api.event import Event
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url


def opsgenie_alias(provider_uid: str, event: Event) -> str:
    obj = event.involved_object
    key = f"{provider_uid}/{obj.kind}/{obj.namespace}/{obj.name}/{event.reason}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:64]


def opsgenie_payload(provider_uid: str, event: Event, message: Message | None = None) -> GoStruct:
    """Flux's alert; a supplied ``message`` (template, group) gives its title, text and fields."""
    obj = event.involved_object
    details = dict(message.fields) if message else dict(event.metadata)
    details["severity"] = message.severity if message else event.severity
    payload = GoStruct(message=message.title if message else f"{obj.kind}/{obj.name}")
    alias = opsgenie_alias(provider_uid, event)
    if alias:
        payload["alias"] = alias
    payload["description"] = message.text if message else event.message
    payload["details"] = details
    return payload


class OpsgenieNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.OPSGENIE

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Opsgenie hook URL")
        if not opts.token_text:
            raise ProviderConfigError("empty Opsgenie apikey/token")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        headers = json_headers({"Authorization": f"GenieKey {self.opts.token_text}"})
        return OutboundRequest(
            "POST", self.opts.address, headers, dumps(opsgenie_payload(self.opts.uid, event, message))
        )

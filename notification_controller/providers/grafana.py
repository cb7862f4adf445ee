"""``grafana``: a Grafana annotation in Graphite format (reference §4.1).

``POST <address>`` (e.g. ``https://grafana.example.com/api/annotations/graphite``) with
``{"when": <event time, Unix seconds>, "text": "kind/name.namespace", "tags": [...]}``. Tags are
``flux``, the reporting controller, ``"<key>: <value>"`` per metadata entry (``:`` inside key or value
replaced by ``|`` so Grafana does not split them; sorted by key here, unspecified order in Flux), then
``kind: <Kind>``, ``name: <name>``, ``namespace: <namespace>``.

Auth: ``Bearer <token>`` when a token is set, else ``Basic`` with username and password when both are
set.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import ClassVar

from ..api.event import Event
from ..api.provider import ProviderType
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers, obj_name
from .message import Message
from .validation import require_url

GO_ZERO_UNIX = -62135596800  # time.Time{}.Unix()


def go_unix(moment: datetime | None) -> int:
    return int(moment.timestamp()) if moment is not None else GO_ZERO_UNIX


def _tag_part(text: str) -> str:
    return text.replace(":", "|")


def grafana_payload(event: Event, message: Message | None = None) -> GoStruct:
    """The annotation's text is the object's name (Flux), or a template's title (``message``)."""
    obj = event.involved_object
    tags = ["flux", event.reporting_controller]
    tags.extend(f"{_tag_part(k)}: {_tag_part(event.metadata[k])}" for k in sorted(event.metadata))
    tags.extend((f"kind: {obj.kind}", f"name: {obj.name}", f"namespace: {obj.namespace}"))
    text = message.title if message else obj_name(event)
    return GoStruct(when=go_unix(event.timestamp), text=text, tags=tags)


class GrafanaNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.GRAFANA

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Grafana URL")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        extra: dict[str, str] = {}
        if self.opts.token_text:
            extra["Authorization"] = f"Bearer {self.opts.token_text}"
        elif self.opts.username and self.opts.password_text:
            pair = f"{self.opts.username}:{self.opts.password_text}".encode()
            extra["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return OutboundRequest(
            "POST", self.opts.address, json_headers(extra), dumps(grafana_payload(event, message))
        )

"""``webex``: a message to a Webex room through the REST API (reference §4.1).

``POST <address>`` (normally ``https://webexapis.com/v1/messages``) with ``Authorization: Bearer <token>``
and ``{"roomId": <channel>, "markdown": <md>}`` (both ``omitempty``). The markdown is a bold heading
with ✅ (💣 for errors), the message, and one ``>**key**: value`` line per metadata entry (sorted by
key here; unspecified order in Flux).
"""

from __future__ import annotations

from typing import ClassVar

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url


def webex_markdown(m: Message) -> str:
    emoji = "💣" if m.severity == SEVERITY_ERROR else "✅"
    lines = [f"{emoji} **{m.title}**\n", f"{m.text}\n"]
    lines.extend(f">**{k}**: {v}\n" for k, v in m.fields)
    return "".join(lines)


class WebexNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.WEBEX

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Webex hook URL")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        payload = GoStruct()
        if self.opts.channel:
            payload["roomId"] = self.opts.channel
        payload["markdown"] = webex_markdown(message or Message.of(event))
        headers = json_headers({"Authorization": f"Bearer {self.opts.token_text}"})
        return OutboundRequest("POST", self.opts.address, headers, dumps(payload))

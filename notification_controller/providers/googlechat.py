"""``googlechat``: a Google Chat incoming webhook, as a legacy ``cards`` message (reference §4.1).

One card: header = object name and reporting controller; a section with the message (red ``<font>``
for errors); a second section with one key/value widget per metadata entry (sorted by key here,
unspecified order in Flux), only when there is metadata. Unset pointers are sent as ``null`` exactly
as Flux sends them. Proxy is honoured; TLS settings are ignored, as in Flux.
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


def google_chat_payload(event: Event, message: Message | None = None) -> GoStruct:
    m = message or Message.of(event)
    header = GoStruct(title=m.title, subtitle=event.reporting_controller, imageUrl=None, imageStyle=None)
    text = m.text
    if m.severity == SEVERITY_ERROR:
        text = f'<font color="#ff0000">{m.text}</font>'
    sections = [GoStruct(header="", widgets=[GoStruct(textParagraph=GoStruct(text=text), keyValue=None)])]
    if m.fields:
        widgets = [
            GoStruct(
                textParagraph=None,
                keyValue=GoStruct(topLabel=k, content=v, contentMultiline=False, bottomLabel=None, icon=None),
            )
            for k, v in m.fields
        ]
        sections.append(GoStruct(header="", widgets=widgets))
    return GoStruct(cards=[GoStruct(header=header, sections=sections)])


class GoogleChatNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.GOOGLE_CHAT
    uses_tls: ClassVar[bool] = False

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Google Chat hook URL")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        return OutboundRequest(
            "POST", self.opts.address, json_headers(), dumps(google_chat_payload(event, message))
        )

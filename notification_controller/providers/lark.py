"""``lark``: a Lark (Feishu) custom-bot webhook, as an interactive card (reference §4.1).

Header ``💫 kind/name.namespace`` on a turquoise template (``🚨`` and red for errors), one ``lark_md``
element: the message in bold, a blank line, then ``key: value`` lines (sorted by key here; unspecified
order in Flux). Flux honours neither proxy nor TLS settings for Lark; neither does this module.
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


def lark_payload(m: Message) -> GoStruct:
    error = m.severity == SEVERITY_ERROR
    emoji, template = ("🚨", "red") if error else ("💫", "turquoise")
    content = f"**{m.text}**\n\n" + "".join(f"{k}: {v}\n" for k, v in m.fields)
    card = GoStruct(
        config=GoStruct(wide_screen_mode=True),
        header=GoStruct(
            title=GoStruct(tag="plain_text", content=f"{emoji} {m.title}"),
            template=template,
        ),
        elements=[GoStruct(tag="div", text=GoStruct(tag="lark_md", content=content))],
    )
    return GoStruct(msg_type="interactive", card=card)


class LarkNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.LARK
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = False

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Lark hook URL")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        return OutboundRequest(
            "POST", self.opts.address, json_headers(), dumps(lark_payload(message or Message.of(event)))
        )

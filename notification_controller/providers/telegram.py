"""``telegram``: ``sendMessage`` of the Telegram Bot API, MarkdownV2 formatted (reference §4.1).

``POST https://api.telegram.org/bot<token>/sendMessage`` with
``{"chat_id", "message_thread_id" (omitempty), "text", "parse_mode": "MarkdownV2"}``. ``spec.channel`` is
``<chat id>`` or ``<chat id>:<thread id>`` (forum topics). Every MarkdownV2 special character of the
heading, the message and the metadata is backslash-escaped, as Flux does.

Deviation (for tests and self-hosted Bot API servers): Flux ignores the address for Telegram. Here,
when an address is set (``spec.address`` or the Secret's ``address``) it replaces
``https://api.telegram.org`` as the API base; without an address the real host is used. The token is
part of the URL path, so it is masked in every error text (URLs are logged as scheme and host only).
Proxy is honoured; TLS settings are ignored, as in Flux.
"""

from __future__ import annotations

from typing import ClassVar
from urllib.parse import quote

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..core.gojson import GoStruct, dumps
from ..errors import ProviderConfigError
from .base import HTTPNotifier, OutboundRequest, ProviderOptions, json_headers
from .registry import register
from .validation import require_url

TELEGRAM_API = "https://api.telegram.org"
MARKDOWN_V2_SPECIAL = frozenset("\\.-_[]()~>`#+=|{}!*")


def escape_markdown_v2(text: str) -> str:
    """Backslash before each MarkdownV2 special character (Flux's ``escapeString``)."""
    return "".join("\\" + ch if ch in MARKDOWN_V2_SPECIAL else ch for ch in text)


def telegram_text(event: Event) -> str:
    emoji = "🚨" if event.severity == SEVERITY_ERROR else "💫"
    obj = event.involved_object
    heading = f"{emoji} {obj.kind.lower()}/{obj.name}/{obj.namespace}"
    lines = "".join(
        f"\\- *{escape_markdown_v2(k)}*: {escape_markdown_v2(event.metadata[k])}\n"
        for k in sorted(event.metadata)
    )
    return f"*{escape_markdown_v2(heading)}*\n{escape_markdown_v2(event.message)}\n{lines}"


@register
class TelegramNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.TELEGRAM
    uses_tls: ClassVar[bool] = False

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        if not opts.channel:
            raise ProviderConfigError("empty Telegram channel")
        if not opts.token_text:
            raise ProviderConfigError("empty Telegram token")
        base = TELEGRAM_API
        if opts.address:
            base = require_url(opts.address, what="Telegram API base URL").rstrip("/")
        self.url = f"{base}/bot{quote(opts.token_text, safe=':')}/sendMessage"
        chat_id, sep, thread = opts.channel.partition(":")
        self.chat_id = chat_id
        self.thread_id = thread if sep else ""

    def build_request(self, event: Event) -> OutboundRequest:
        payload = GoStruct(chat_id=self.chat_id)
        if self.thread_id:
            payload["message_thread_id"] = self.thread_id
        payload["text"] = telegram_text(event)
        payload["parse_mode"] = "MarkdownV2"
        return OutboundRequest("POST", self.url, json_headers(), dumps(payload))

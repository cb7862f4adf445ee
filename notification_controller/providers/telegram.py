"""``telegram``: ``sendMessage`` of the Telegram Bot API, MarkdownV2 formatted (reference §4.1).

``POST https://api.telegram.org/bot<token>/sendMessage`` with
``{"chat_id", "message_thread_id" (omitempty), "text", "parse_mode": "MarkdownV2"}``. ``spec.channel`` is
``<chat id>`` or ``<chat id>:<thread id>`` (forum topics). Every MarkdownV2 special character of the
heading, the message and the metadata is backslash-escaped, as Flux does.

As in Flux, ``spec.address`` (and the Secret's ``address``) is ignored: the bot token travels in the URL
path, so it must never follow a stale or foreign address to another host. The API base can be replaced
only by the controller's environment variable ``TELEGRAM_API_BASE_URL`` (read when the notifier is built;
empty or unset = ``https://api.telegram.org``), for a self-hosted Bot API server, a proxy that fronts it,
and tests: an operator's choice, not a tenant's. The token is masked in every error text (URLs are logged
as scheme and host only). Proxy is honoured; TLS settings are ignored, as in Flux.
"""

from __future__ import annotations

import os
from typing import ClassVar
from urllib.parse import quote

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url

TELEGRAM_API = "https://api.telegram.org"
API_URL_ENV = "TELEGRAM_API_BASE_URL"
MARKDOWN_V2_SPECIAL = frozenset("\\.-_[]()~>`#+=|{}!*")


def escape_markdown_v2(text: str) -> str:
    """Backslash before each MarkdownV2 special character (Flux's ``escapeString``)."""
    return "".join("\\" + ch if ch in MARKDOWN_V2_SPECIAL else ch for ch in text)


def telegram_text(event: Event, message: Message | None = None) -> str:
    """Flux's text (its own ``kind/name/namespace`` heading); a supplied ``message`` gives the heading too."""
    m = message or Message.of(event)
    emoji = "🚨" if m.severity == SEVERITY_ERROR else "💫"
    obj = event.involved_object
    title = m.title if message else f"{obj.kind.lower()}/{obj.name}/{obj.namespace}"
    heading = f"{emoji} {title}"
    lines = "".join(f"\\- *{escape_markdown_v2(k)}*: {escape_markdown_v2(v)}\n" for k, v in m.fields)
    return f"*{escape_markdown_v2(heading)}*\n{escape_markdown_v2(m.text)}\n{lines}"


def telegram_api_base() -> str:
    """``TELEGRAM_API_BASE_URL`` from the environment, else Telegram's API; never the Provider's address."""
    override = os.environ.get(API_URL_ENV, "").strip()
    if not override:
        return TELEGRAM_API
    return require_url(override, what=API_URL_ENV).rstrip("/")


class TelegramNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.TELEGRAM
    uses_tls: ClassVar[bool] = False

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        if not opts.channel:
            raise ProviderConfigError("empty Telegram channel")
        if not opts.token_text:
            raise ProviderConfigError("empty Telegram token")
        self.url = f"{telegram_api_base()}/bot{quote(opts.token_text, safe=':')}/sendMessage"
        chat_id, sep, thread = opts.channel.partition(":")
        self.chat_id = chat_id
        self.thread_id = thread if sep else ""

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        payload = GoStruct(chat_id=self.chat_id)
        if self.thread_id:
            payload["message_thread_id"] = self.thread_id
        payload["text"] = telegram_text(event, message)
        payload["parse_mode"] = "MarkdownV2"
        return OutboundRequest("POST", self.url, json_headers(), dumps(payload))

"""``gotify`` (beyond Flux): a push notification through a self-hosted Gotify server.

Gotify's documented push: ``POST <server>/message`` with the application token in ``X-Gotify-Key`` (the
Secret's ``token``; a header, not the ``?token=`` query Gotify also accepts, so the token never sits in a
URL that a proxy or an error may log) and ``{"title", "message", "priority", "extras"}``. ``address`` is
the server URL, a path prefix kept (``https://example.com/gotify``).

* Priority from severity (Gotify's 0 … 10; its Android app: 0 silent, 1–3 icon only, 4–7 sound, 8–10
  sound and pop-up): trace → 2, info → 5, error → 8.
* The message is markdown (``extras: {"client::display": {"contentType": "text/markdown"}}``, Gotify's
  documented extra): the text, then one ``- **name**: value`` line per field.
* Answers: 200 with the stored message; 400 (``Field 'message' is required``), 401 (no or a wrong token)
  and 403 (a client token instead of an application token) are permanent; 5xx retried.
"""

from __future__ import annotations

from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

from ..api.event import SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_TRACE, Event
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url

PRIORITY = {SEVERITY_TRACE: 2, SEVERITY_INFO: 5, SEVERITY_ERROR: 8}
"""Severity → Gotify priority (0 … 10)."""
MARKDOWN = GoStruct({"client::display": GoStruct(contentType="text/markdown")})


def gotify_url(address: str) -> str:
    require_url(address, what="Gotify server URL")
    parts = urlsplit(address)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/message", "", ""))


def gotify_markdown(message: Message) -> str:
    lines = [message.text]
    if message.fields:
        lines.append("")
        lines.extend(f"- **{name}**: {value}" for name, value in message.fields)
    return "\n".join(lines)


def gotify_payload(message: Message) -> GoStruct:
    return GoStruct(
        title=message.title,
        message=gotify_markdown(message),
        priority=PRIORITY.get(message.severity, 5),
        extras=MARKDOWN,
    )


class GotifyNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.GOTIFY

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        self.url = gotify_url(opts.address)
        if not opts.token_text.strip():
            raise ProviderConfigError("empty Gotify application token (the Secret's 'token')")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        m = message or Message.of(event)
        headers = json_headers({"X-Gotify-Key": self.opts.token_text.strip()})
        return OutboundRequest("POST", self.url, headers, dumps(gotify_payload(m)))

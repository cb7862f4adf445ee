"""``ntfy`` (beyond Flux): a push notification through an ntfy server (ntfy.sh or self-hosted).

Users asked for it in Flux's tracker (fluxcd/notification-controller PR#691, open since 2023). ntfy's
documented *publish as JSON* form is used: ``POST <server>/`` with ``{"topic", "title", "message",
"priority", "tags"}``, not ``POST /<topic>`` with ``X-Title``/``X-Priority`` headers, because a header
carries Latin-1 only (a title with ``é`` or an emoji would need RFC 2047 encoding) while the JSON body is
UTF-8 as it is.

* The topic is the address's last path segment (``https://ntfy.sh/flux-alerts``), as ntfy's own URLs
  write it, or ``spec.channel`` when set (``address`` is then the server, a path prefix kept:
  ``https://example.com/ntfy``). A topic is ntfy's ``[-_A-Za-z0-9]{1,64}``; anything else is refused at
  construction. On a public server *the topic is the password*: it is masked in errors like a webhook path.
* Auth: the Secret's ``token`` (an access token, ``tk_…``) as ``Authorization: Bearer``, else its
  ``username``/``password`` as HTTP basic auth; none for an open topic.
* Priority from severity (ntfy's 1 min … 5 max): trace → 2 (low), info → 3 (default), error → 4 (high).
  An error is not 5 ("max/urgent": long vibration bursts, shown over Do Not Disturb). Tags: the emoji
  ``rotating_light`` for an error, ``information_source`` for info (ntfy shows a known tag as its emoji).
* The message is the Message's text, then one ``name: value`` line per field, as plain text (ntfy's
  markdown renders in the web app only), cut to ntfy's default 4,096-byte message limit (beyond it the
  server turns the message into an attachment, or refuses it).
"""

from __future__ import annotations

import base64
import re
from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

from ..api.event import SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_TRACE, Event
from ..api.provider import ProviderType
from ..core.redact import ADDRESS_PART_MIN
from ..errors import ProviderConfigError
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .formatting import cut
from .message import Message
from .validation import require_url

TOPIC = re.compile(r"[-_A-Za-z0-9]{1,64}")
"""ntfy's topic names (its server's ``topicRegex``)."""
MESSAGE_LIMIT = 4096
"""ntfy's default ``message-size-limit``, in bytes."""
TITLE_LIMIT = 256
"""Kept short: a notification title is one line on a phone (ntfy has no documented title limit)."""

PRIORITY = {SEVERITY_TRACE: 2, SEVERITY_INFO: 3, SEVERITY_ERROR: 4}
"""Severity → ntfy priority (1 min, 2 low, 3 default, 4 high, 5 max/urgent)."""
TAGS = {SEVERITY_ERROR: ["rotating_light"], SEVERITY_INFO: ["information_source"]}


def ntfy_target(address: str, channel: str) -> tuple[str, str]:
    """``(publish URL, topic)``: the server root to POST the JSON to, and the topic (see the module doc)."""
    require_url(address, what="ntfy server URL")
    parts = urlsplit(address)
    path = parts.path.rstrip("/")
    topic = channel.strip()
    if not topic:
        path, _, topic = path.rpartition("/")
        if not topic:
            raise ProviderConfigError(
                "empty ntfy topic: end spec.address with it (https://ntfy.sh/<topic>) or set spec.channel"
            )
    if not TOPIC.fullmatch(topic):
        raise ProviderConfigError("invalid ntfy topic: 1 to 64 letters, digits, '-' or '_'")
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/", "", "")), topic


def cut_bytes(text: str, limit: int) -> str:
    """``text`` within ``limit`` UTF-8 bytes, never splitting a character, an ellipsis marking a cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", errors="ignore") + "…"


def ntfy_message(message: Message) -> str:
    lines = [message.text]
    if message.fields:
        lines.append("")
        lines.extend(f"{name}: {value}" for name, value in message.fields)
    return cut_bytes("\n".join(lines), MESSAGE_LIMIT)


def ntfy_payload(topic: str, message: Message) -> GoStruct:
    payload = GoStruct(
        topic=topic,
        title=cut(message.title, TITLE_LIMIT),
        message=ntfy_message(message),
        priority=PRIORITY.get(message.severity, 3),
    )
    tags = TAGS.get(message.severity)
    if tags:
        payload["tags"] = tags
    return payload


class NtfyNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.NTFY

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        self.url, self.topic = ntfy_target(opts.address, opts.channel)
        self.headers = json_headers(self._auth())

    def _auth(self) -> dict[str, str] | None:
        if self.opts.token_text:
            return {"Authorization": f"Bearer {self.opts.token_text}"}
        if self.opts.password_text:
            basic = f"{self.opts.username}:{self.opts.password_text}".encode()
            return {"Authorization": "Basic " + base64.b64encode(basic).decode("ascii")}
        return None

    def masks(self) -> list[str]:
        """The topic too when it is long enough to be a secret (on ntfy.sh it is the only one)."""
        masks = list(self.opts.masks())
        if len(self.topic) >= ADDRESS_PART_MIN:
            masks.append(self.topic)
        return masks

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        m = message or Message.of(event)
        return OutboundRequest("POST", self.url, dict(self.headers), dumps(ntfy_payload(self.topic, m)))

"""``zulip``: a stream message through the Zulip REST API (reference §4.1).

``POST <address with its path replaced by /api/v1/messages>``, HTTP basic auth with the bot's email
(username) and API key (password), form-encoded ``content``, ``to``, ``topic``, ``type=stream`` (keys
sorted as Go's ``url.Values.Encode`` sorts them). ``spec.channel`` is ``<stream>/<topic>``. The content
is Flux's markdown post (``formatMarkdownPost``, shared with the PR/MR comment providers):

    ## Flux Status

    ℹ️ Kind/namespace/name       (⚠️ for errors)

    <message>

    Metadata:
    * `key`: value                (sorted by key, ``change_request`` left out)
"""

from __future__ import annotations

import base64
from typing import ClassVar
from urllib.parse import urlencode, urlsplit, urlunsplit

from ..api.event import MD_CHANGE_REQUEST, SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions
from .message import Message
from .validation import require_url

MESSAGES_PATH = "/api/v1/messages"


def basic_authorization(username: str, password: str) -> str:
    """Go's ``SetBasicAuth`` value (UTF-8, no restriction on ``:`` in the username)."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def format_markdown_post(event: Event) -> str:
    """Flux's ``formatMarkdownPost`` (reference §4.0)."""
    emoji = "⚠️" if event.severity == SEVERITY_ERROR else "ℹ️"
    obj = event.involved_object
    lines = "".join(
        f"* `{k}`: {event.metadata[k]}\n" for k in sorted(event.metadata) if k != MD_CHANGE_REQUEST
    )
    return f"## Flux Status\n\n{emoji} {obj.kind}/{obj.namespace}/{obj.name}\n\n{event.message}\n\nMetadata:\n{lines}"


def parse_zulip_channel(channel: str) -> tuple[str, str]:
    stream, sep, topic = channel.partition("/")
    if not sep or not stream or not topic:
        raise ProviderConfigError(
            f"invalid Zulip channel format, expected <channel>/<topic>, got '{channel}'"
        )
    return stream, topic


def templated_post(message: Message) -> str:
    """A template's title as the heading, its text, then the fields (Flux's post layout)."""
    lines = [f"## {message.title}", "", message.text]
    if message.fields:
        lines += ["", "Metadata:", *(f"* `{k}`: {v}" for k, v in message.fields)]
    return "\n".join(lines)


class ZulipNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.ZULIP

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Zulip endpoint URL")
        parts = urlsplit(opts.address)
        self.url = urlunsplit((parts.scheme, parts.netloc, MESSAGES_PATH, parts.query, ""))
        self.stream, self.topic = parse_zulip_channel(opts.channel)

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        form = {
            "content": format_markdown_post(event) if message is None else templated_post(message),
            "to": self.stream,
            "topic": self.topic,
            "type": "stream",
        }
        body = urlencode(sorted(form.items())).encode("utf-8")
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if self.opts.username or self.opts.password_text:
            headers["Authorization"] = basic_authorization(self.opts.username, self.opts.password_text)
        return OutboundRequest("POST", self.url, headers, body)

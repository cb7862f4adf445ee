"""``slack``, ``discord`` and ``rocket``: the three Slack-compatible webhooks (reference §4.1).

All three send Flux's ``SlackPayload``: one attachment titled ``kind/name.namespace`` with the event
message as markdown text and one field per metadata entry. They differ in channel, username default,
colours and fallback text:

* slack: channel = ``spec.channel``, username = ``spec.username`` or the reporting controller,
  fallback ``"<objName>: <first line>"``, colours ``good``/``danger``, ``Authorization: Bearer <token>``
  when the Secret has a token. On ``https://slack.com/api/chat.postMessage`` (the Web API, which always
  answers 200) the body must be ``{"ok": true}``. Beyond Flux, with a bot token on the Web API the
  notifier *threads* (an Alert's ``threadBy``): a delivery with a thread adds ``thread_ts`` to the payload,
  and the first message of a thread hands its ``ts`` back (``Thread.started``).
* discord: ``/slack`` is appended to the webhook path (Discord's Slack-compatible endpoint), channel
  ``""``, no fallback text, colours ``good``/``danger``; TLS settings are ignored, as in Flux.
* rocket: channel and username as given (no default), colours ``#0076D7``/``#FF0000``.

Metadata fields are sorted by key (Flux iterates a Go map: the order is unspecified there).
"""

from __future__ import annotations

import json
from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..errors import FailureReason, PermanentDeliveryError
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest, OutboundResponse
from .base import DeliveryContext, HTTPNotifier, ProviderOptions, first_line, json_headers
from .message import Message
from .validation import require_url

SLACK_API_POST_MESSAGE = "https://slack.com/api/chat.postMessage"


def slack_payload(
    message: Message,
    *,
    channel: str,
    username: str,
    fallback: str,
    color: str,
) -> GoStruct:
    """Flux's ``SlackPayload`` with one attachment (``text`` omitted, ``attachments`` set)."""
    fields = [GoStruct(title=k, value=v, short=False) for k, v in message.fields]
    attachment = GoStruct(
        fallback=fallback,
        color=color,
        author_name=message.title,
        text=message.text,
        mrkdwn_in=["text"],
        fields=fields,
    )
    return GoStruct(channel=channel, username=username, icon_url="", icon_emoji="", attachments=[attachment])


def validate_slack_response(response: OutboundResponse) -> None:
    """The Web API answers 200 even on failure: ``{"ok": false, "error": "..."}`` (reference §4.1)."""
    try:
        data = json.loads(response.body)
    except ValueError:
        raise PermanentDeliveryError(
            "unable to unmarshal response body: invalid JSON",
            reason="bad_response",
            failure=FailureReason.PROVIDER_ERROR,
        ) from None
    if isinstance(data, dict) and data.get("ok") is True:
        return
    error = data.get("error", "") if isinstance(data, dict) else ""
    raise PermanentDeliveryError(
        f"Slack responded with error: {error}", reason="slack_error", failure=FailureReason.PROVIDER_ERROR
    )


def posted_ts(body: bytes) -> str:
    """The ``ts`` of the message chat.postMessage created (empty if the answer has none)."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    ts = data.get("ts") if isinstance(data, dict) else None
    return ts if isinstance(ts, str) and len(ts) <= 64 else ""


class SlackNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.SLACK

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Slack hook URL")
        self.threads = opts.address == SLACK_API_POST_MESSAGE and bool(opts.token_text)
        """Whether this Provider can reply in a thread (the Web API with a bot token)."""

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        thread = ctx.thread if self.threads else None
        if thread is None:
            await super().post(event, ctx)
            return
        response = await self.send(self.build_request(event, ctx.message, thread_ts=thread.ts), ctx)
        if not thread.ts:
            thread.started = posted_ts(response.body)

    def build_request(
        self, event: Event, message: Message | None = None, *, thread_ts: str = ""
    ) -> OutboundRequest:
        m = message or Message.of(event)
        color = "danger" if m.severity == SEVERITY_ERROR else "good"
        payload = slack_payload(
            m,
            channel=self.opts.channel,
            username=self.opts.username or event.reporting_controller,
            fallback=f"{m.title}: {first_line(m.text)}",
            color=color,
        )
        if thread_ts:
            payload["thread_ts"] = thread_ts
        extra = {"Authorization": f"Bearer {self.opts.token_text}"} if self.opts.token_text else None
        return OutboundRequest("POST", self.opts.address, json_headers(extra), dumps(payload))

    def check_response(self, response: OutboundResponse) -> None:
        if self.opts.address == SLACK_API_POST_MESSAGE:
            validate_slack_response(response)


def go_clean_path(path: str) -> str:
    """Go's ``path.Clean``: lexical cleanup of a slash-separated path."""
    if not path:
        return "."
    rooted = path.startswith("/")
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not rooted:
                out.append("..")
            continue
        out.append(part)
    cleaned = "/".join(out)
    if rooted:
        return "/" + cleaned
    return cleaned or "."


def discord_url(address: str) -> str:
    """Append ``/slack`` to the path (Go ``path.Join``) unless the URL already ends with ``/slack``."""
    if address.endswith("/slack"):
        return address
    parts = urlsplit(address)
    joined = go_clean_path("/".join(p for p in (parts.path, "slack") if p))
    if not joined.startswith("/"):
        joined = "/" + joined
    return urlunsplit((parts.scheme, parts.netloc, joined, parts.query, parts.fragment))


class DiscordNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.DISCORD
    uses_tls: ClassVar[bool] = False  # Flux ignores certSecretRef for Discord

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Discord hook URL")
        self.url = discord_url(opts.address)

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        m = message or Message.of(event)
        color = "danger" if m.severity == SEVERITY_ERROR else "good"
        payload = slack_payload(
            m,
            channel="",
            username=self.opts.username or event.reporting_controller,
            fallback="",
            color=color,
        )
        return OutboundRequest("POST", self.url, json_headers(), dumps(payload))


class RocketNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.ROCKET

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Rocket hook URL")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        m = message or Message.of(event)
        color = "#FF0000" if m.severity == SEVERITY_ERROR else "#0076D7"
        payload = slack_payload(
            m, channel=self.opts.channel, username=self.opts.username, fallback="", color=color
        )
        return OutboundRequest("POST", self.opts.address, json_headers(), dumps(payload))

"""``slack``, ``discord`` and ``rocket``: the three Slack-compatible webhooks (reference §4.1).

All three send Flux's ``SlackPayload``: one attachment titled ``kind/name.namespace`` with the event
message as markdown text and one field per metadata entry. They differ in channel, username default,
colours and fallback text:

* slack: channel = ``spec.channel``, username = ``spec.username`` or the reporting controller,
  fallback ``"<objName>: <first line>"``, colours ``good``/``danger``, ``Authorization: Bearer <token>``
  when the Secret has a token. On the Web API (which always answers 200) the body must be
  ``{"ok": true}``. Flux checks that on ``https://slack.com/api/chat.postMessage`` only; here the Web API
  is any address whose path ends with ``/chat.postMessage`` (``web_api_url``): slack.com, GovSlack's
  slack-gov.com, or a proxy in front of them (``https://proxy.corp/slack/api/chat.postMessage``).
  Incoming webhooks (``hooks.slack.com/services/…``) never end so, and keep Flux's behaviour byte for byte.
  Beyond Flux, with a bot token on the Web API the notifier *threads* (an Alert's ``threadBy``): a delivery
  with a thread adds ``thread_ts`` to the payload, and the first message of a thread hands its ``ts``
  back (``Thread.started``); and it *edits* (``resolveInPlace``): a delivery with an ``Edit`` target calls
  ``chat.update`` (the same base address, method ``chat.update``) on the failure's message with the
  channel ID its chat.postMessage answered, and posts a new message when the edit fails (nothing lost).
* discord: ``/slack`` is appended to the webhook path (Discord's Slack-compatible endpoint), channel
  ``""``, no fallback text, colours ``good``/``danger``; TLS settings are ignored, as in Flux. With
  ``resolveInPlace`` the failure is posted with ``?wait=true`` (Discord then answers the message, with its
  id) and the recovery edits it: ``PATCH <webhook>/messages/<id>`` with a native embed (the edit endpoint
  has no Slack-compatible form).
* rocket: channel and username as given (no default), colours ``#0076D7``/``#FF0000``.

Ids in answers are checked before they are kept or echoed: a Slack ``ts`` is ``digits.digits``, a channel
ID letters and digits, a Discord id a snowflake (digits; it becomes a path segment): anything else (a
number, a 1 MB string, ``../``) is refused and counted, and the delivery goes on as if there was none.

Metadata fields are sorted by key (Flux iterates a Go map: the order is unspecified there).
"""

from __future__ import annotations

import json
import logging
import re
from typing import ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..errors import DeliveryError, FailureReason, PermanentDeliveryError
from ..lib.gojson import GoStruct, dumps
from ..outbound import Budget, OutboundRequest, OutboundResponse
from .base import DeliveryContext, HTTPNotifier, ProviderOptions, first_line, json_headers
from .message import Edit, Message
from .validation import require_url

log = logging.getLogger(__name__)

SLACK_API_POST_MESSAGE = "https://slack.com/api/chat.postMessage"
POST_MESSAGE = "chat.postMessage"
UPDATE = "chat.update"

_TS = re.compile(r"[0-9]{1,20}\.[0-9]{1,20}")
"""A Slack message ``ts`` (``1700000000.000100``): what an answer's ``ts`` must look like to be kept."""
_CHANNEL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A Slack channel ID (``C0123ABCD``) as chat.postMessage answers it (chat.update wants the ID)."""
_SNOWFLAKE = re.compile(r"[0-9]{1,20}")
"""A Discord message id (a 64-bit snowflake in decimal): it becomes a path segment of the edit."""
RESOLVED_STATE = "resolved"
DISCORD_GOOD = 0x2EB886
"""Slack's ``good`` green, as Discord shows the Slack-compatible message's colour."""


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


def web_api_url(address: str, method: str) -> str | None:
    """The Slack Web API URL of ``method`` next to ``address`` when ``address`` is a Web API
    chat.postMessage endpoint (its path's last segment is exactly ``chat.postMessage``: slack.com,
    slack-gov.com, a proxy's ``/…/chat.postMessage``), else None (an incoming webhook). The query is kept."""
    try:
        parts = urlsplit(address)
    except ValueError:
        return None
    head, slash, last = parts.path.rpartition("/")
    if not slash or last != POST_MESSAGE:
        return None
    return urlunsplit((parts.scheme, parts.netloc, f"{head}/{method}", parts.query, ""))


def _json_object(body: bytes) -> dict[str, object] | None:
    """The answer as a JSON object (None: not JSON, too deep, not an object)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def validate_slack_response(response: OutboundResponse) -> None:
    """The Web API answers 200 even on failure: ``{"ok": false, "error": "..."}`` (reference §4.1)."""
    try:
        data = json.loads(response.body)
    except (ValueError, RecursionError):
        raise PermanentDeliveryError(
            "unable to unmarshal response body: invalid JSON",
            reason="bad_response",
            failure=FailureReason.PROVIDER_ERROR,
        ) from None
    if isinstance(data, dict) and data.get("ok") is True:
        return
    error = data.get("error", "") if isinstance(data, dict) else ""
    if not isinstance(error, str):
        error = ""
    raise PermanentDeliveryError(
        f"Slack responded with error: {error[:200]}",
        reason="slack_error",
        failure=FailureReason.PROVIDER_ERROR,
    )


def _matching(value: object, pattern: re.Pattern[str]) -> str:
    return value if isinstance(value, str) and pattern.fullmatch(value) else ""


def posted_ts(body: bytes) -> str:
    """The ``ts`` of the message chat.postMessage created (empty if the answer has none, or not a ts)."""
    data = _json_object(body)
    return _matching(data.get("ts"), _TS) if data is not None else ""


def posted_message(body: bytes) -> tuple[str, str]:
    """``(ts, channel ID)`` of the message chat.postMessage created; ``("", "")`` unless both are valid."""
    data = _json_object(body)
    if data is None:
        return "", ""
    ts, channel = _matching(data.get("ts"), _TS), _matching(data.get("channel"), _CHANNEL_ID)
    return (ts, channel) if ts and channel else ("", "")


def resolved_fields(edit: Edit) -> list[tuple[str, str]]:
    """What an edited message says first: its state, and how long it failed."""
    return [("state", RESOLVED_STATE), *((("recovered after", edit.after),) if edit.after else ())]


def resolved_fallback(title: str, edit: Edit) -> str:
    return f"{title}: {RESOLVED_STATE}" + (f", recovered after {edit.after}" if edit.after else "")


class SlackNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.SLACK

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Slack hook URL")
        self.update_url = web_api_url(opts.address, UPDATE)
        self.web_api = self.update_url is not None
        """Whether the address is a Web API chat.postMessage endpoint (answers are ``{"ok": ...}``)."""
        self.threads = self.web_api and bool(opts.token_text)
        """Whether this Provider can reply in a thread (the Web API with a bot token)."""
        self.edits = self.threads
        """Whether this Provider can edit its messages (``resolveInPlace``: chat.update, same conditions)."""

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        thread = ctx.thread if self.threads else None
        edit = ctx.edit if self.edits else None
        if thread is None and edit is None:
            await super().post(event, ctx)
            return
        budget = Budget(self.opts.timeout)  # spec.timeout for every request of the delivery
        message = self.message_for(ctx.message, ctx.templated)
        if edit is not None and edit.target:
            if await self._update(event, message, edit, ctx, budget):
                if thread is not None:  # threadBy: a reply under the resolved message too
                    parent = edit.thread or edit.target
                    await self._send(self.build_request(event, message, thread_ts=parent), ctx, budget)
                    if not thread.ts:
                        thread.started = parent
                return
        thread_ts = thread.ts if thread is not None else ""
        response = await self._send(self.build_request(event, message, thread_ts=thread_ts), ctx, budget)
        if thread is not None and not thread.ts:
            thread.started = posted_ts(response.body)
        if edit is not None:
            edit.posted, edit.posted_channel = posted_message(response.body)
            edit.rejected = not edit.posted

    async def _send(self, request: OutboundRequest, ctx: DeliveryContext, budget: Budget) -> OutboundResponse:
        return await ctx.http.send(
            request,
            timeout=budget.remaining("slack"),
            proxy=self.opts.proxy.reveal() if self.opts.proxy else None,
            tls=self.opts.tls,
            masks=self.masks(),
            check=self.check_response,
        )

    async def _update(
        self, event: Event, message: Message | None, edit: Edit, ctx: DeliveryContext, budget: Budget
    ) -> bool:
        """chat.update on the failure's message; False (and ``edit.fallback``) when it did not happen."""
        try:
            await ctx.http.send(
                self.build_update(event, message, edit),
                timeout=budget.remaining("slack chat.update"),
                proxy=self.opts.proxy.reveal() if self.opts.proxy else None,
                tls=self.opts.tls,
                masks=self.masks(),
                check=validate_slack_response,
                retry=False,  # the fallback (a new message) is the retry
            )
        except DeliveryError as exc:
            edit.fallback = exc.failure.value
            log.info("slack: chat.update failed, the recovery is posted as a new message: %s", exc)
            return False
        edit.edited = True
        return True

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
        return OutboundRequest("POST", self.opts.address, self._headers(), dumps(payload))

    def build_update(self, event: Event, message: Message | None, edit: Edit) -> OutboundRequest:
        """chat.update of ``edit.target`` in ``edit.channel``: the recovery's attachment, green, its state
        ``resolved`` and how long it failed as the first fields."""
        assert self.update_url is not None, "only a Web API Provider edits"
        m = message or Message.of(event)
        fields = [GoStruct(title=k, value=v, short=True) for k, v in resolved_fields(edit)]
        fields.extend(GoStruct(title=k, value=v, short=False) for k, v in m.fields)
        attachment = GoStruct(
            fallback=resolved_fallback(m.title, edit),
            color="good",
            author_name=m.title,
            text=m.text,
            mrkdwn_in=["text"],
            fields=fields,
        )
        payload = GoStruct(channel=edit.channel, ts=edit.target, attachments=[attachment])
        return OutboundRequest("POST", self.update_url, self._headers(), dumps(payload))

    def _headers(self) -> dict[str, str]:
        extra = {"Authorization": f"Bearer {self.opts.token_text}"} if self.opts.token_text else None
        return json_headers(extra)

    def check_response(self, response: OutboundResponse) -> None:
        if self.web_api:
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


def with_query(url: str, **params: str) -> str:
    """``url`` with these query parameters set (others kept, in order)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    query.extend(params.items())
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


def discord_webhook_base(address: str) -> str:
    """The webhook's own URL (``…/webhooks/<id>/<token>``): ``address`` without a trailing ``/slack``
    path segment, cleaned as Go's ``path.Clean`` would, without query or fragment."""
    parts = urlsplit(address)
    path = go_clean_path(parts.path or "/")
    if path.endswith("/slack"):
        path = path.removesuffix("/slack") or "/"
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/"), "", ""))


def discord_message_url(address: str, message_id: str) -> str:
    """Discord's *Edit Webhook Message*: ``PATCH <webhook>/messages/<id>`` (the address's query, e.g.
    ``thread_id``, kept; ``wait`` dropped). ``message_id`` must be a snowflake (digits)."""
    if not _SNOWFLAKE.fullmatch(message_id):
        raise ValueError("a Discord message id is digits")
    query = [(k, v) for k, v in parse_qsl(urlsplit(address).query, keep_blank_values=True) if k != "wait"]
    url = f"{discord_webhook_base(address)}/messages/{message_id}"
    return f"{url}?{urlencode(query)}" if query else url


def posted_discord_id(body: bytes) -> str:
    """The ``id`` of the message an execute with ``wait=true`` created (empty: none, or not a snowflake)."""
    data = _json_object(body)
    return _matching(data.get("id"), _SNOWFLAKE) if data is not None else ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class DiscordNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.DISCORD
    uses_tls: ClassVar[bool] = False  # Flux ignores certSecretRef for Discord
    edits: ClassVar[bool] = True
    """A webhook edits the messages it posted (``resolveInPlace``)."""

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Discord hook URL")
        self.url = discord_url(opts.address)
        self.wait_url = with_query(self.url, wait="true")

    def masks(self) -> list[str]:
        """The webhook path without ``/slack`` too: the edit URL carries the token without it."""
        masks = list(self.opts.masks())
        tail = discord_webhook_base(self.opts.address).split("://", 1)[-1].partition("/")[2]
        if len(tail) >= 12:
            masks.append(tail)
        return masks

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        edit = ctx.edit
        if edit is None:
            await super().post(event, ctx)
            return
        budget = Budget(self.opts.timeout)
        message = self.message_for(ctx.message, ctx.templated)
        if edit.target and await self._edit(event, message, edit, ctx, budget):
            return
        request = self.build_request(event, message, wait=True)
        response = await ctx.http.send(
            request,
            timeout=budget.remaining("discord"),
            proxy=self.opts.proxy.reveal() if self.opts.proxy else None,
            masks=self.masks(),
            check=self.check_response,
        )
        edit.posted = posted_discord_id(response.body)
        edit.rejected = not edit.posted

    async def _edit(
        self, event: Event, message: Message | None, edit: Edit, ctx: DeliveryContext, budget: Budget
    ) -> bool:
        try:
            request = self.build_edit(event, message, edit)
        except ValueError:  # not a snowflake: never a path segment
            edit.fallback, edit.rejected = FailureReason.INVALID_REQUEST.value, True
            return False
        try:
            await ctx.http.send(
                request,
                timeout=budget.remaining("discord edit"),
                proxy=self.opts.proxy.reveal() if self.opts.proxy else None,
                masks=self.masks(),
                retry=False,  # the fallback (a new message) is the retry
            )
        except DeliveryError as exc:
            edit.fallback = exc.failure.value
            log.info("discord: editing the message failed, the recovery is posted as a new message: %s", exc)
            return False
        edit.edited = True
        return True

    def build_request(
        self, event: Event, message: Message | None = None, *, wait: bool = False
    ) -> OutboundRequest:
        m = message or Message.of(event)
        color = "danger" if m.severity == SEVERITY_ERROR else "good"
        payload = slack_payload(
            m,
            channel="",
            username=self.opts.username or event.reporting_controller,
            fallback="",
            color=color,
        )
        return OutboundRequest("POST", self.wait_url if wait else self.url, json_headers(), dumps(payload))

    def build_edit(self, event: Event, message: Message | None, edit: Edit) -> OutboundRequest:
        """``PATCH …/messages/<id>`` with one embed: the recovery, green, its state and how long it failed
        first (Discord's limits: title 256, description 4096, 25 fields of 256/1024 characters)."""
        m = message or Message.of(event)
        pairs = [*((k, v, True) for k, v in resolved_fields(edit)), *((k, v, False) for k, v in m.fields)]
        fields = [
            {"name": _cut(k, 256) or "-", "value": _cut(v, 1024) or "-", "inline": inline}
            for k, v, inline in pairs[:25]
        ]
        embed = {
            "title": _cut(m.title, 256),
            "description": _cut(m.text, 4096),
            "color": DISCORD_GOOD,
            "fields": fields,
        }
        body = dumps(GoStruct(embeds=[embed]))
        return OutboundRequest(
            "PATCH", discord_message_url(self.opts.address, edit.target), json_headers(), body
        )


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

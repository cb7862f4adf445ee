"""``mattermost`` (beyond Flux): a post through a Mattermost incoming webhook.

Flux users point a ``slack`` Provider at Mattermost (fluxcd/notification-controller#522 asks for more).
That works because Mattermost translates Slack's payload, but it sends Slack's fields Mattermost ignores
(``icon_emoji: ""``, ``mrkdwn_in``) and none of its own. This type sends Mattermost's documented
incoming-webhook payload: ``POST <address>`` (``https://HOST/hooks/<key>``, the key is the credential,
masked like every webhook path) with

* ``channel`` (``spec.channel``: a channel's name, or ``@user`` for a direct message; omitted when empty:
  the webhook's own channel), ``username`` (``spec.username``, else the reporting controller) and
  ``icon_url`` (the Secret's ``icon_url``, omitted when absent); Mattermost applies the last two only when
  its *Enable integrations to override usernames / profile picture icons* settings are on, and ignores
  them otherwise;
* one entry in ``attachments`` (Mattermost's message attachments): ``fallback`` (the plain-text summary
  push notifications show), ``color`` from severity, ``author_name`` the Message's title, ``text`` (markdown,
  cut to Mattermost's 16,383-character post limit), one ``fields`` entry per field (``short`` when both
  name and value are short, so two sit side by side);
* ``props.card``: markdown shown in the right-hand panel when the post's info icon is clicked
  (Mattermost 5.14+): the event's object, reason, severity, reporting controller and time, which the post
  itself does not repeat.

Severity → colour: error ``#D24B4E`` (red), info ``#2EB886`` (green), trace ``#A0A0A0`` (grey).
Mattermost's message ``priority`` (``important``/``urgent``) is not sent: it needs Mattermost 7.7+ with
message priority turned on, and no server was at hand to check what an older one does with it. Mattermost answers ``200 ok``; a 400 (``Unable to parse incoming data``,
an unknown channel) or 403 (a webhook locked to its channel) is permanent, a 5xx retried.
"""

from __future__ import annotations

from typing import ClassVar

from ..api.event import GO_ZERO_TIME, SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_TRACE, Event
from ..api.provider import ProviderType
from ..lib.clock import rfc3339
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, first_line, json_headers
from .formatting import cut
from .message import Message
from .validation import require_url

COLOR = {SEVERITY_ERROR: "#D24B4E", SEVERITY_INFO: "#2EB886", SEVERITY_TRACE: "#A0A0A0"}
"""Severity → attachment colour (Mattermost takes any hex colour)."""
POST_LIMIT = 16383
"""Mattermost's maximum post message length (runes)."""
SHORT = 40
"""A field whose name and value fit in this many characters is ``short`` (shown two per row)."""


def card(event: Event) -> str:
    """The right-hand panel's markdown: what the event is about, beyond the Message."""
    obj = event.involved_object
    rows = [
        ("object", f"{obj.kind}/{obj.name}"),
        ("namespace", obj.namespace),
        ("reason", event.reason),
        ("severity", event.severity),
        ("reported by", event.reporting_controller),
        ("time", rfc3339(event.timestamp) if event.timestamp not in (None, GO_ZERO_TIME) else ""),
    ]
    table = "\n".join(f"| {k} | {_cell(v)} |" for k, v in rows if v)
    return f"| | |\n|:--|:--|\n{table}"


def _cell(value: str) -> str:
    """A markdown table cell: no pipe or line break can end it early."""
    return value.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def mattermost_payload(
    event: Event, message: Message, *, channel: str, username: str, icon_url: str
) -> GoStruct:
    fields = [
        GoStruct(title=k, value=v, short=len(k) <= SHORT and len(v) <= SHORT) for k, v in message.fields
    ]
    attachment = GoStruct(
        fallback=cut(f"{message.title}: {first_line(message.text)}", 1000),
        color=COLOR.get(message.severity, COLOR[SEVERITY_INFO]),
        author_name=message.title,
        text=cut(message.text, POST_LIMIT),
    )
    if fields:
        attachment["fields"] = fields
    payload = GoStruct()
    if channel:
        payload["channel"] = channel
    if username:
        payload["username"] = username
    if icon_url:
        payload["icon_url"] = icon_url
    payload["attachments"] = [attachment]
    payload["props"] = GoStruct(card=card(event))
    return payload


class MattermostNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.MATTERMOST

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Mattermost webhook URL")
        icon = opts.secret_data.get("icon_url", b"").decode("utf-8", errors="replace").strip()
        self.icon_url = require_url(icon, what="Mattermost icon_url") if icon else ""

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        m = message or Message.of(event)
        payload = mattermost_payload(
            event,
            m,
            channel=self.opts.channel,
            username=self.opts.username or event.reporting_controller,
            icon_url=self.icon_url,
        )
        return OutboundRequest("POST", self.opts.address, json_headers(), dumps(payload))

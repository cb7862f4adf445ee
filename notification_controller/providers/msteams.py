"""``msteams``: Microsoft Teams incoming webhooks and Workflows (reference §4.1).

Two payloads, chosen by the webhook host as Flux does:

* host (port stripped) ending with ``.webhook.office.com`` → the legacy Office 365 connector
  ``MessageCard`` (theme colour ``0076D7``, ``FF0000`` for errors; one fact per metadata entry,
  sorted by key here — unspecified order in Flux);
* any other host (Power Automate / Workflows URLs) → an Adaptive Card 1.4 message: a Container with
  the object name (large, bolder), the message (``attention`` colour for errors) and a FactSet whose
  first fact is ``summary`` (when present) followed by the other metadata sorted by key.

Go's ``omitempty`` rules are kept: an empty message leaves the TextBlock without ``text``, an event
without metadata gives a FactSet without ``facts``.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import urlsplit

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url

ADAPTIVE_CARD_VERSION = "1.4"
LEGACY_HOST_SUFFIX = ".webhook.office.com"


def is_legacy_connector(address: str) -> bool:
    """Go: ``strings.HasSuffix(strings.Split(u.Host, ":")[0], ".webhook.office.com")``."""
    netloc = urlsplit(address).netloc
    host = netloc.rsplit("@", 1)[-1]
    return host.split(":", 1)[0].endswith(LEGACY_HOST_SUFFIX)


def message_card(m: Message) -> GoStruct:
    name = m.title
    facts = [GoStruct(name=k, value=v) for k, v in m.fields]
    return GoStruct(
        {
            "@type": "MessageCard",
            "@context": "http://schema.org/extensions",
            "themeColor": "FF0000" if m.severity == SEVERITY_ERROR else "0076D7",
            "summary": name,
            "sections": [GoStruct(activityTitle=m.text, activitySubtitle=name, facts=facts)],
        }
    )


def _text_block(
    text: str, *, size: str = "", weight: str = "", color: str = "", wrap: bool = False
) -> GoStruct:
    block = GoStruct(type="TextBlock")
    for key, value in (("text", text), ("size", size), ("weight", weight), ("color", color)):
        if value:
            block[key] = value
    if wrap:
        block["wrap"] = True
    return block


def adaptive_card(m: Message) -> GoStruct:
    facts: list[GoStruct] = []
    summary = m.field("summary")
    if summary is not None:
        facts.append(GoStruct(title="summary", value=summary))
    facts.extend(GoStruct(title=k, value=v) for k, v in m.fields if k != "summary")
    fact_set = GoStruct(type="FactSet")
    if facts:
        fact_set["facts"] = facts
    items: list[Any] = [
        _text_block(m.title, size="large", weight="bolder", wrap=True),
        _text_block(m.text, color="attention" if m.severity == SEVERITY_ERROR else "", wrap=True),
        fact_set,
    ]
    content = GoStruct(
        {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": ADAPTIVE_CARD_VERSION,
            "body": [GoStruct(type="Container", items=items)],
            "msteams": GoStruct(width="Full"),
        }
    )
    attachment = GoStruct(contentType="application/vnd.microsoft.card.adaptive", content=content)
    return GoStruct(type="message", attachments=[attachment])


class MSTeamsNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.MSTEAMS

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="MS Teams webhook URL")
        self.legacy = is_legacy_connector(opts.address)

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        m = message or Message.of(event)
        payload = message_card(m) if self.legacy else adaptive_card(m)
        return OutboundRequest("POST", self.opts.address, json_headers(), dumps(payload))

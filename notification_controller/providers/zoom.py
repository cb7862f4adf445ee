"""``zoom``: a Zoom Team Chat incoming-webhook message in the rich ``format=full`` form (reference §4.1).

``POST <address>?format=full`` (unless the address already sets ``format``) with
``Authorization: <verification token>`` — the raw token, no scheme, as Zoom expects — and
``{"content": {"head": {"text": objName, "sub_head": {"text": severity}}, "body": [message item,
fields item]}}``. The fields item (one key/value per metadata entry, sorted by key as Flux does) is
only present when there is metadata.
"""

from __future__ import annotations

from typing import ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..api.event import Event
from ..api.provider import ProviderType
from ..errors import ProviderConfigError
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url


def zoom_url(address: str) -> str:
    """Add ``format=full`` unless a non-empty ``format`` is present; re-encode the query the Go way
    (``url.Values.Encode``: keys sorted, values in order)."""
    parts = urlsplit(address)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    values: dict[str, list[str]] = {}
    for key, value in pairs:
        values.setdefault(key, []).append(value)
    if not (values.get("format") or [""])[0]:
        values["format"] = ["full"]
        query = urlencode([(k, v) for k in sorted(values) for v in values[k]])
        return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
    return address


def zoom_payload(event: Event, message: Message | None = None) -> GoStruct:
    """Rendered from the message model (``Message.of(event)`` by default: Flux's exact payload)."""
    m = message or Message.of(event)
    body = [GoStruct(type="message", text=m.text) if m.text else GoStruct(type="message")]
    if m.fields:
        body.append(GoStruct(type="fields", items=[GoStruct(key=k, value=v) for k, v in m.fields]))
    head = GoStruct(text=m.title, sub_head=GoStruct(text=m.severity))
    return GoStruct(content=GoStruct(head=head, body=body))


class ZoomNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.ZOOM

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Zoom incoming webhook URL")
        if not opts.token_text:
            raise ProviderConfigError("empty Zoom verification token")
        self.url = zoom_url(opts.address)

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        headers = json_headers({"Authorization": self.opts.token_text})
        return OutboundRequest("POST", self.url, headers, dumps(zoom_payload(event, message)))

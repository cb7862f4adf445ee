"""``matrix``: an ``m.text`` message in a Matrix room via the client-server API (reference §4.1).

``PUT <address>/_matrix/client/r0/rooms/<channel>/send/m.room.message/<txnId>`` with
``Authorization: Bearer <token>``. The transaction id is the lowercase hex SHA-1 of the event encoded
exactly as Go's ``json.Marshal`` encodes it (``Event.to_go_json``, reference §9), so a retry — or the
same event sent by Flux itself — reuses the id and the homeserver de-duplicates it.

Body: ``{"body": "<💫|🚨> kind/name.namespace\\n<message>\\n- key: value\\n...", "msgtype": "m.text"}``
(metadata lines sorted by key here; unspecified order in Flux). Flux ignores proxy settings for
Matrix (TLS is honoured); so does this module.
"""

from __future__ import annotations

import hashlib
from typing import ClassVar

from ..api.event import SEVERITY_ERROR, Event
from ..api.provider import ProviderType
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url


def matrix_txn_id(event: Event) -> str:
    return hashlib.sha1(event.to_go_json(), usedforsecurity=False).hexdigest()


def matrix_body(m: Message) -> str:
    emoji = "🚨" if m.severity == SEVERITY_ERROR else "💫"
    lines = "".join(f"- {k}: {v}\n" for k, v in m.fields)
    return f"{emoji} {m.title}\n{m.text}\n{lines}"


class MatrixNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.MATRIX
    uses_proxy: ClassVar[bool] = False

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Matrix homeserver URL")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        url = (
            f"{self.opts.address}/_matrix/client/r0/rooms/{self.opts.channel}"
            f"/send/m.room.message/{matrix_txn_id(event)}"
        )
        payload = GoStruct(body=matrix_body(message or Message.of(event)), msgtype="m.text")
        headers = json_headers({"Authorization": f"Bearer {self.opts.token_text}"})
        return OutboundRequest("PUT", url, headers, dumps(payload))

"""``githubdispatch``: a ``repository_dispatch`` event on a GitHub repository (reference §4.1).

``POST /repos/{owner}/{repo}/dispatches`` with ``{"event_type":"<Kind>/<name>.<namespace>",
"client_payload":<the event JSON>}`` so a GitHub Actions workflow (``on: repository_dispatch``) can react
to Flux events. Authentication as for ``github`` (token, password or GitHub App); the API base derives
from the address host (``api.github.com`` for github.com, ``<host>/api/v3/`` for Enterprise).
"""

from __future__ import annotations

import json
from typing import ClassVar

from ...api.event import Event
from ...api.provider import ProviderType
from ...outbound import OutboundRequest
from ..base import DeliveryContext, ProviderOptions
from ..common import Caller
from ..message import with_text
from .forges import GitHubRepo
from .githubapp import GitHubAuth, github_headers


def dispatch_body(event: Event) -> bytes:
    """go-github's encoding of ``DispatchRequestOptions``: event type unescaped, payload = ``json.Marshal(event)``."""
    obj = event.involved_object
    event_type = f"{obj.kind}/{obj.name}.{obj.namespace}"
    return (
        b'{"event_type":'
        + json.dumps(event_type, ensure_ascii=False).encode("utf-8", errors="replace")
        + b',"client_payload":'
        + event.to_go_json()
        + b"}\n"
    )


class GitHubDispatchNotifier:
    type: ClassVar[ProviderType] = ProviderType.GITHUB_DISPATCH
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True  # TLS for GitHub Enterprise only; proxy only for the GitHub App token

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.auth = GitHubAuth(opts)
        self.repo = GitHubRepo.from_address(opts.address)

    def build_request(self, event: Event, token: str) -> OutboundRequest:
        return OutboundRequest(
            "POST", self.repo.url("dispatches"), github_headers(token, body=True), dispatch_body(event)
        )

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        call = Caller(ctx, self.opts)
        token = (await self.auth.token(call)).token
        await call.send(
            self.build_request(with_text(event, ctx.template), token),
            what="could not send github repository dispatch webhook",
            tls=self.repo.enterprise,
        )

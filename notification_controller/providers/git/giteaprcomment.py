"""``giteapullrequestcomment``: one upserted comment per Flux object on a Gitea pull request (reference §4.3).

Identity: ``GET /api/v1/user`` (login). Listing: ``GET /api/v1/repos/{o}/{r}/issues/{n}/comments?page=1&limit=100``;
edit ``PATCH /api/v1/repos/{o}/{r}/issues/comments/{id}``; create ``POST /api/v1/repos/{o}/{r}/issues/{n}/comments``
with ``{"body"}``. Auth, proxy and TLS as for ``gitea``. See ``changerequest`` for the upsert.
"""

from __future__ import annotations

from typing import ClassVar

from ...api.provider import ProviderType
from ...lib.gojson import GoStruct
from ...outbound import OutboundRequest
from ..base import ProviderOptions
from ..common import Caller, go_json, str_field
from .changerequest import PR_PREFIX, ChangeRequestCommenter
from .forges import GiteaRepo, gitea_headers, gitea_token


class GiteaPullRequestCommentNotifier(ChangeRequestCommenter):
    type: ClassVar[ProviderType] = ProviderType.GITEA_PR_COMMENT
    uses_proxy: ClassVar[bool] = True
    uses_tls: ClassVar[bool] = True
    prefix: ClassVar[str] = PR_PREFIX

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        self.token = gitea_token(opts)
        self.repo = GiteaRepo.from_address(opts.address)

    def user_request(self) -> OutboundRequest:
        return OutboundRequest("GET", self.repo.api("user"), gitea_headers(self.token))

    async def authenticate(self, call: Caller) -> tuple[str, str]:
        user = await self.send(call, self.user_request(), "failed to get authenticated user info")
        return self.token, (str_field(user, "login") if isinstance(user, dict) else None) or ""

    def list_request(self, number: int, token: str) -> OutboundRequest:
        url = self.repo.url("issues", str(number), "comments") + "?page=1&limit=100"
        return OutboundRequest("GET", url, gitea_headers(token))

    def edit_request(self, number: int, comment: int, body: str, token: str) -> OutboundRequest:
        return OutboundRequest(
            "PATCH",
            self.repo.url("issues", "comments", str(comment)),
            gitea_headers(token, body=True),
            go_json(GoStruct(body=body)),
        )

    def create_request(self, number: int, body: str, token: str) -> OutboundRequest:
        return OutboundRequest(
            "POST",
            self.repo.url("issues", str(number), "comments"),
            gitea_headers(token, body=True),
            go_json(GoStruct(body=body)),
        )

"""``gitlabmergerequestcomment``: one upserted note per Flux object on a GitLab merge request (reference §4.3).

Identity: ``GET /api/v4/user`` (username). Listing: ``GET /api/v4/projects/{id}/merge_requests/{iid}/notes?
sort=asc&order_by=created_at&per_page=100``; update ``PUT .../notes/{note_id}``; create ``POST .../notes`` with
``{"body"}``. Auth and TLS as for ``gitlab``. See ``changerequest`` for the upsert.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ...api.provider import ProviderType
from ...lib.gojson import GoStruct
from ...outbound import OutboundRequest
from ..base import ProviderOptions
from ..common import Caller, go_json, str_field
from .changerequest import MR_PREFIX, ChangeRequestCommenter
from .forges import GitLabProject, gitlab_headers, gitlab_token


class GitLabMergeRequestCommentNotifier(ChangeRequestCommenter):
    type: ClassVar[ProviderType] = ProviderType.GITLAB_MR_COMMENT
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True
    prefix: ClassVar[str] = MR_PREFIX
    noun: ClassVar[str] = "merge request note"
    list_noun: ClassVar[str] = "merge request notes"

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        self.token = gitlab_token(opts)
        self.project = GitLabProject.from_address(opts.address)

    def author(self, item: dict[str, Any]) -> str | None:
        return str_field(item, "author", "username")

    def user_request(self) -> OutboundRequest:
        return OutboundRequest("GET", f"{self.project.api_base}user", gitlab_headers(self.token))

    async def authenticate(self, call: Caller) -> tuple[str, str]:
        user = await self.send(call, self.user_request(), "failed to get authenticated user info")
        return self.token, (str_field(user, "username") if isinstance(user, dict) else None) or ""

    def _notes(self, number: int, *more: str) -> str:
        return self.project.url("merge_requests", str(number), "notes", *more)

    def list_request(self, number: int, token: str) -> OutboundRequest:
        url = self._notes(number) + "?sort=asc&order_by=created_at&per_page=100"
        return OutboundRequest("GET", url, gitlab_headers(token))

    def edit_request(self, number: int, comment: int, body: str, token: str) -> OutboundRequest:
        return OutboundRequest(
            "PUT",
            self._notes(number, str(comment)),
            gitlab_headers(token, body=True),
            go_json(GoStruct(body=body)),
        )

    def create_request(self, number: int, body: str, token: str) -> OutboundRequest:
        return OutboundRequest(
            "POST", self._notes(number), gitlab_headers(token, body=True), go_json(GoStruct(body=body))
        )

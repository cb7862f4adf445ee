"""``githubpullrequestcomment``: one upserted comment per Flux object on a GitHub pull request (reference §4.3).

Identity: ``GET /user`` (login) with a token; with a GitHub App, ``<app slug>[bot]`` (the slug comes from
``GET /app`` while minting the installation token). Listing: ``GET /repos/{o}/{r}/issues/{n}/comments?
sort=created&direction=asc&per_page=100``; edit ``PATCH /repos/{o}/{r}/issues/comments/{id}``; create
``POST /repos/{o}/{r}/issues/{n}/comments`` with ``{"body"}``. See ``changerequest`` for the upsert.
"""

from __future__ import annotations

from typing import ClassVar

from ...api.provider import ProviderType
from ...outbound import OutboundRequest
from ..base import ProviderOptions
from ..common import Caller, go_json, str_field
from .changerequest import PR_PREFIX, ChangeRequestCommenter
from .forges import GitHubRepo
from .githubapp import GitHubAuth, github_headers


def github_comment_body(body: str) -> bytes:
    return go_json({"body": body}, escape_html=False, newline=True)


class GitHubPullRequestCommentNotifier(ChangeRequestCommenter):
    type: ClassVar[ProviderType] = ProviderType.GITHUB_PR_COMMENT
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True  # TLS for GitHub Enterprise only; proxy only for the GitHub App token
    prefix: ClassVar[str] = PR_PREFIX

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        self.auth = GitHubAuth(opts, reflect_slug=True)
        self.repo = GitHubRepo.from_address(opts.address)

    def tls_enabled(self) -> bool:
        return self.repo.enterprise

    def user_request(self, token: str) -> OutboundRequest:
        return OutboundRequest("GET", f"{self.repo.api_base}user", github_headers(token))

    async def authenticate(self, call: Caller) -> tuple[str, str]:
        token = await self.auth.token(call)
        if token.app_slug:
            return token.token, f"{token.app_slug}[bot]"
        user = await self.send(call, self.user_request(token.token), "failed to get authenticated user info")
        return token.token, (str_field(user, "login") if isinstance(user, dict) else None) or ""

    def list_request(self, number: int, token: str) -> OutboundRequest:
        url = self.repo.url("issues", str(number), "comments") + "?sort=created&direction=asc&per_page=100"
        return OutboundRequest("GET", url, github_headers(token))

    def edit_request(self, number: int, comment: int, body: str, token: str) -> OutboundRequest:
        return OutboundRequest(
            "PATCH",
            self.repo.url("issues", "comments", str(comment)),
            github_headers(token, body=True),
            github_comment_body(body),
        )

    def create_request(self, number: int, body: str, token: str) -> OutboundRequest:
        return OutboundRequest(
            "POST",
            self.repo.url("issues", str(number), "comments"),
            github_headers(token, body=True),
            github_comment_body(body),
        )

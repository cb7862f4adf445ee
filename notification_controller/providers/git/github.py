"""``github``: commit statuses on GitHub and GitHub Enterprise (reference §4.2).

One delivery = list the commit's statuses (``GET /repos/{o}/{r}/commits/{sha}/statuses?per_page=50``),
skip when the first status with our context already has the same state and description, else create
one (``POST /repos/{o}/{r}/statuses/{sha}`` with ``{"state","description","context"}``). ``Progressing``
events are skipped; ``info`` → ``success``, ``error`` → ``failure``. The context is the commit status id
the dispatcher computed (``spec.commitStatusExpr`` or the default formula). Authentication: see
``githubapp``. The TLS settings apply to GitHub Enterprise only (as in Flux); the proxy only to the
GitHub App token exchange.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ...api.provider import ProviderType
from ...lib.gojson import GoStruct
from ...outbound import OutboundRequest
from ..base import ProviderOptions
from ..common import Caller, go_json, json_list, path_segment, str_field
from .base import CommitStatus, CommitStatusNotifier
from .forges import GitHubRepo
from .githubapp import GitHubAuth, github_headers


def duplicate_github_status(statuses: list[dict[str, Any]], status: CommitStatus) -> bool:
    """The FIRST listed status with our context decides: same state and description → duplicate."""
    for item in statuses:
        context, state, description = (
            str_field(item, "context"),
            str_field(item, "state"),
            str_field(item, "description"),
        )
        if context is None or state is None or description is None:
            continue
        if context == status.id:
            return state == status.state and description == status.description
    return False


class GitHubNotifier(CommitStatusNotifier):
    type: ClassVar[ProviderType] = ProviderType.GITHUB
    forge: ClassVar[str] = "github"
    states: ClassVar[tuple[str, str]] = ("success", "failure")
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True  # TLS for GitHub Enterprise only; proxy only for the GitHub App token

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.auth = GitHubAuth(opts)
        self.repo = GitHubRepo.from_address(opts.address)

    def list_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        url = self.repo.url("commits", path_segment(status.sha), "statuses") + "?per_page=50"
        return OutboundRequest("GET", url, github_headers(token))

    def create_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        body = go_json(
            GoStruct(state=status.state, description=status.description, context=status.id),
            escape_html=False,
            newline=True,
        )
        url = self.repo.url("statuses", path_segment(status.sha))
        return OutboundRequest("POST", url, github_headers(token, body=True), body)

    def is_duplicate(self, existing: Any, status: CommitStatus) -> bool:
        return duplicate_github_status(json_list(existing), status)

    def api_tls(self) -> bool:
        return self.repo.enterprise  # TLS material for GitHub Enterprise only

    async def credential(self, call: Caller) -> str:
        return (await self.auth.token(call)).token

"""``gitlab``: commit statuses on GitLab (reference §4.2).

The project id is the whole repository path (subgroups included), URL-escaped (``group%2Fsub%2Fproject``);
the API base is ``<scheme>://<host>/api/v4/``. One delivery = ``GET /projects/{id}/repository/commits/{sha}/
statuses?name=<commit status id>``; skip when ANY listed status has the same sha, status, description and
name; else ``POST /projects/{id}/statuses/{sha}`` with ``{"state","name","description"}``. ``info`` →
``success``, ``error`` → ``failed``; ``Progressing`` skipped. Auth: ``PRIVATE-TOKEN`` = the Secret's
``token`` (or ``password``). TLS settings apply; the proxy does not (as in Flux).
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote

from ...api.provider import ProviderType
from ...lib.gojson import GoStruct
from ...outbound import OutboundRequest
from ..base import ProviderOptions
from ..common import go_json, json_list, path_segment, str_field
from .base import CommitStatus, CommitStatusNotifier
from .forges import GitLabProject, gitlab_headers, gitlab_token


def duplicate_gitlab_status(statuses: list[dict[str, Any]], status: CommitStatus) -> bool:
    """ANY listed status with the same sha, status, description and name is a duplicate."""
    return any(
        str_field(s, "sha") == status.sha
        and str_field(s, "status") == status.state
        and str_field(s, "description") == status.description
        and str_field(s, "name") == status.id
        for s in statuses
    )


class GitLabNotifier(CommitStatusNotifier):
    forge: ClassVar[str] = "gitlab"
    states: ClassVar[tuple[str, str]] = ("success", "failed")
    list_what: ClassVar[str] = "unable to list commit status"
    create_what: ClassVar[str] = "could not set commit status"
    type: ClassVar[ProviderType] = ProviderType.GITLAB
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.token = gitlab_token(opts)
        self.project = GitLabProject.from_address(opts.address)

    def list_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        url = self.project.url("repository", "commits", path_segment(status.sha), "statuses")
        return OutboundRequest("GET", f"{url}?name={quote(status.id, safe='')}", gitlab_headers(self.token))

    def create_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        body = go_json(GoStruct(state=status.state, name=status.id, description=status.description))
        url = self.project.url("statuses", path_segment(status.sha))
        return OutboundRequest("POST", url, gitlab_headers(self.token, body=True), body)

    def is_duplicate(self, existing: Any, status: CommitStatus) -> bool:
        return duplicate_gitlab_status(json_list(existing), status)

"""``gitea``: commit statuses on Gitea and Forgejo (reference §4.2).

One delivery = ``GET /api/v1/repos/{o}/{r}/commits/{sha}/statuses?page=0&limit=50``; skip when the first
status with our context has the same state and description; else ``POST /api/v1/repos/{o}/{r}/statuses/{sha}``
with ``{"state","target_url":"","description","context"}``. Unlike the other forges, ``Progressing`` events
are posted as ``pending``; ``info`` → ``success``, ``error`` → ``failure``. Auth: ``Authorization: token <T>``
(the Secret's ``token``, else ``password``). Proxy and TLS settings apply.

Deviation: Flux's Gitea SDK asks the server for its version (``GET /api/v1/version``) when the notifier is
built; we build notifiers without I/O and skip that call (it only gates SDK features we do not use).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ...api.event import Event
from ...api.provider import ProviderType
from ...lib.gojson import GoStruct
from ...outbound import OutboundRequest
from ..base import ProviderOptions
from ..common import go_json, json_list, path_segment, str_field
from .base import (
    CommitStatus,
    CommitStatusNotifier,
    is_progressing,
    severity_state,
)
from .forges import GiteaRepo, gitea_headers, gitea_token


def duplicate_gitea_status(statuses: list[dict[str, Any]], status: CommitStatus) -> bool:
    """The first listed status with our context (and non-empty fields) decides."""
    for item in statuses:
        context, state, description = (
            str_field(item, "context"),
            str_field(item, "status"),
            str_field(item, "description"),
        )
        if state is None:
            state = str_field(item, "state")
        if not context or not state or not description:
            continue
        if context == status.id:
            return state == status.state and description == status.description
    return False


class GiteaNotifier(CommitStatusNotifier):
    forge: ClassVar[str] = "gitea"
    states: ClassVar[tuple[str, str]] = ("success", "failure")
    skips_progressing: ClassVar[bool] = False  # unlike the other forges: a pending status
    api_proxy: ClassVar[bool] = True
    type: ClassVar[ProviderType] = ProviderType.GITEA
    uses_proxy: ClassVar[bool] = True
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.token = gitea_token(opts)
        self.repo = GiteaRepo.from_address(opts.address)

    def state(self, event: Event) -> str:
        return "pending" if is_progressing(event) else severity_state(event, *self.states, self.forge)

    def list_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        url = self.repo.url("commits", path_segment(status.sha), "statuses") + "?page=0&limit=50"
        return OutboundRequest("GET", url, gitea_headers(self.token))

    def create_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        body = go_json(
            GoStruct(state=status.state, target_url="", description=status.description, context=status.id)
        )
        url = self.repo.url("statuses", path_segment(status.sha))
        return OutboundRequest("POST", url, gitea_headers(self.token, body=True), body)

    def is_duplicate(self, existing: Any, status: CommitStatus) -> bool:
        return duplicate_gitea_status(json_list(existing), status)

"""``azuredevops``: commit statuses on Azure DevOps Repos (reference §4.2).

The address is ``https://dev.azure.com/<org>/<project>/_git/<repo>`` (four path components); the
organisation URL is ``<host>/<org>``. One delivery = ``GET {org}/{project}/_apis/git/repositories/{repo}/
commits/{sha}/statuses``; skip when the first status with our context (name and genre) has the same state
and description; else ``POST`` to the same URL with ``{"context":{"genre","name"},"description","state"}``.
The context name is the commit status id, the genre ``fluxcd`` (``fluxcd:<summary>`` when the event
carries a ``summary``). ``info`` → ``succeeded``, ``error`` → ``error``; ``Progressing`` skipped. Auth: the
Secret's ``token`` is a personal access token (basic auth with an empty user). Without one, workload
identity (``outbound/identity.py``) mints an Azure AD token for Azure DevOps, sent the same way, as Flux hands it to
the SDK's PAT connection. TLS settings apply to Azure DevOps, the proxy to the token endpoint only.
That token is the controller's (or minted with its RBAC), so it goes only to Azure DevOps Services
(``https://dev.azure.com``, ``https://<org>.visualstudio.com``), never to another host the address names
(a deviation: Flux's client sends it to the address host); a test server needs the operator's
``--workload-identity-custom-endpoints`` (``outbound/identity.py``). A personal access token from the Secret goes
to the address host, as in Flux.

Deviation: we call the REST API directly with ``?api-version=6.0`` (Flux's SDK discovers the resource
location first).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ...api.event import Event
from ...api.provider import ProviderType
from ...errors import DeliveryError, ProviderConfigError, rewrap
from ...lib.gojson import GoStruct
from ...lib.goquote import quote as go_quote
from ...outbound import OutboundRequest
from ...outbound.identity import AZURE_SCOPE_DEVOPS, azure_access_token
from ..base import ProviderOptions
from ..common import Caller, basic_auth, go_json, json_list, path_segment, str_field
from .base import (
    CommitStatus,
    CommitStatusNotifier,
    parse_git_address,
    require_web_host,
    split_repo_id,
)

API_VERSION = "6.0"
GENRE = "fluxcd"


def duplicate_azure_devops_status(statuses: list[dict[str, Any]], status: CommitStatus) -> bool:
    """The first listed status with the same context name and genre decides."""
    for item in statuses:
        if (
            str_field(item, "context", "name") == status.id
            and str_field(item, "context", "genre") == status.genre
        ):
            return (
                str_field(item, "state") == status.state
                and str_field(item, "description") == status.description
            )
    return False


class AzureDevOpsNotifier(CommitStatusNotifier):
    forge: ClassVar[str] = "azure devops"
    states: ClassVar[tuple[str, str]] = ("succeeded", "error")
    type: ClassVar[ProviderType] = ProviderType.AZURE_DEVOPS
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.token = opts.token_text  # empty: workload identity at delivery time
        parsed = parse_git_address(opts.address)
        comps = split_repo_id(parsed.id, 4)
        if comps is None:
            raise ProviderConfigError(f"invalid repository id {go_quote(parsed.id)}")
        require_web_host(parsed)
        org, self.project, _, self.repo = comps
        self.org_url = f"{parsed.host}/{path_segment(org)}"

    def _url(self, sha: str) -> str:
        return (
            f"{self.org_url}/{path_segment(self.project)}/_apis/git/repositories/{path_segment(self.repo)}"
            f"/commits/{path_segment(sha)}/statuses?api-version={API_VERSION}"
        )

    def _headers(self, token: str, *, body: bool = False) -> dict[str, str]:
        headers = {"Accept": "application/json", "Authorization": basic_auth("", token)}
        if body:
            headers["Content-Type"] = "application/json"
        return headers

    def build_status(self, event: Event, commit_status: str = "") -> CommitStatus | None:
        """The context genre carries the event's ``summary`` metadata when there is one."""
        status = super().build_status(event, commit_status)
        if status is None:
            return None
        summary = event.metadata.get("summary")
        return dataclasses.replace(status, genre=f"{GENRE}:{summary}" if summary else GENRE)

    def list_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        return OutboundRequest("GET", self._url(status.sha), self._headers(token or self.token))

    def create_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        body = go_json(
            GoStruct(
                context=GoStruct(genre=status.genre, name=status.id),
                description=status.description,
                state=status.state,
            )
        )
        return OutboundRequest(
            "POST", self._url(status.sha), self._headers(token or self.token, body=True), body
        )

    def is_duplicate(self, existing: Any, status: CommitStatus) -> bool:
        values = existing.get("value") if isinstance(existing, dict) else existing
        return duplicate_azure_devops_status(json_list(values), status)

    async def credential(self, call: Caller) -> str:
        if self.token:
            return ""  # the Secret's token is in the options (list/create_request fall back to it)
        try:
            token: str = await azure_access_token(
                call, AZURE_SCOPE_DEVOPS, self.org_url, "the Azure DevOps organisation in spec.address"
            )
            return token
        except DeliveryError as exc:
            raise rewrap(exc, "failed to acquire azure devops token: failed to get token") from None

"""``bitbucket``: build statuses on Bitbucket Cloud (reference §4.2).

The repository is ``owner/repo`` from the address (its host is ignored: the API is Bitbucket Cloud's).
The status key is the hex SHA-1 of the commit status id (Bitbucket limits keys to 40 characters). One
delivery = ``GET <api>/repositories/{o}/{r}/commit/{sha}/statuses/build/{key}`` (404 = none yet); skip
when it has the same state and description; else ``POST <api>/repositories/{o}/{r}/commit/{sha}/statuses/
build`` with ``{"key","url":"https://bitbucket.org","state","name","description"}``. ``info`` →
``SUCCESSFUL``, ``error`` → ``FAILED``; ``Progressing`` skipped. Auth: the Secret's ``token`` must be
``<user>:<app password>`` (HTTP basic). TLS settings apply; the proxy does not (as in Flux).

API base ``<api>``: as Flux's Bitbucket client (``ktrysmt/go-bitbucket``) does, the controller's
environment variable ``BITBUCKET_API_BASE_URL`` when set and non-empty, else ``https://api.bitbucket.org/2.0``
(e.g. an Isolated Cloud instance, an API-compatible mirror, tests). It is read when the notifier is built,
and only its scheme, host and path are used (userinfo and query dropped, as the client does); a trailing
slash is tolerated. Provider and Secret keys stay exactly Flux's, so manifests remain portable.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar
from urllib.parse import urlsplit

from ...api.event import Event
from ...api.provider import ProviderType
from ...errors import ProviderConfigError
from ...lib.gojson import GoStruct
from ...lib.goquote import quote as go_quote
from ...outbound import OutboundRequest
from ..base import ProviderOptions
from ..common import Caller, basic_auth, go_json, path_segment, str_field
from ..validation import require_url
from .base import (
    CommitStatus,
    CommitStatusNotifier,
    parse_git_address,
    split_repo_id,
)
from .forges import sha1_hex

API_URL_ENV = "BITBUCKET_API_BASE_URL"
DEFAULT_API_BASE = "https://api.bitbucket.org/2.0"


def bitbucket_api_base() -> str:
    """go-bitbucket's ``apiBaseUrlEnv`` + ``GetApiBaseURL``: ``scheme://host`` + path of the env value."""
    raw = os.environ.get(API_URL_ENV, "").strip() or DEFAULT_API_BASE
    try:
        parts = urlsplit(require_url(raw, what=API_URL_ENV))
    except ProviderConfigError as exc:
        raise ProviderConfigError(
            f"failed to create bitbucket client: unable to parse Bitbucket base Url from environment: {exc}"
        ) from None
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}".rstrip("/")


def duplicate_bitbucket_status(existing: Any, status: CommitStatus) -> bool:
    """The status stored under our key has the same state and description."""
    if not isinstance(existing, dict):
        return False
    return (str_field(existing, "state") or "") == status.state and (
        str_field(existing, "description") or ""
    ) == status.description


class BitbucketNotifier(CommitStatusNotifier):
    forge: ClassVar[str] = "bitbucket"
    states: ClassVar[tuple[str, str]] = ("SUCCESSFUL", "FAILED")
    list_what: ClassVar[str] = "could not get commit status"
    missing_is_empty: ClassVar[bool] = True  # the status is read by key: 404 = not set yet
    type: ClassVar[ProviderType] = ProviderType.BITBUCKET
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        token = opts.token_text
        if not token:
            raise ProviderConfigError("bitbucket token cannot be empty")
        parsed = parse_git_address(opts.address)
        comps = token.split(":")
        if len(comps) != 2:
            raise ProviderConfigError("invalid token format, expected to be <user>:<password>")
        self.username, self.password = comps
        repo = split_repo_id(parsed.id, 2)
        if repo is None:
            raise ProviderConfigError(f"invalid repository id {go_quote(parsed.id)}")
        self.owner, self.repo = repo
        self.api_base = bitbucket_api_base()

    def _url(self, sha: str, *parts: str) -> str:
        base = f"{self.api_base}/repositories/{path_segment(self.owner)}/{path_segment(self.repo)}"
        return f"{base}/commit/{path_segment(sha)}/statuses/build" + "".join(f"/{p}" for p in parts)

    def _headers(self, *, body: bool = False) -> dict[str, str]:
        headers = {"Accept": "application/json", "Authorization": basic_auth(self.username, self.password)}
        if body:
            headers["Content-Type"] = "application/json"
        return headers

    def build_status(self, event: Event, commit_status: str = "") -> CommitStatus | None:
        """The key is the SHA-1 of the commit status id (Bitbucket limits its length)."""
        status = super().build_status(event, commit_status)
        return dataclasses.replace(status, id=sha1_hex(status.id)) if status is not None else None

    def list_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        return OutboundRequest("GET", self._url(status.sha, path_segment(status.id)), self._headers())

    def create_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        body = go_json(
            GoStruct(
                key=status.id,
                url="https://bitbucket.org",
                state=status.state,
                name=status.name,
                description=status.description,
            )
        )
        return OutboundRequest("POST", self._url(status.sha), self._headers(body=True), body)

    def is_duplicate(self, existing: Any, status: CommitStatus) -> bool:
        return duplicate_bitbucket_status(existing, status)

    async def credential(self, call: Caller) -> str:
        call.add_mask(self.password)  # the Secret's token is "<user>:<password>": mask the password alone too
        return ""

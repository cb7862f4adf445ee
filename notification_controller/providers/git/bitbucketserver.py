"""``bitbucketserver``: build statuses on Bitbucket Server / Data Center (reference §4.2).

The address must be the repository's http(s) clone URL, ``<base>[/<context>]/scm/<PROJECT>/<repo>.git``;
what precedes the last ``/scm/`` is the context path. One delivery =
``GET <base><context>/rest/api/latest/projects/{p}/repos/{r}/commits/{sha}/builds?key=<key>`` (404 = none);
skip when it returns the same key, state, description and name; else ``POST`` to the same URL with
``{"description","key","name","state","url":<address>}`` and the headers ``x-atlassian-token: no-check``
and ``x-requested-with: XMLHttpRequest``. The key is the hex SHA-1 of the commit status id; the name is
``<lower(kind/name)> [<description>]`` (Bitbucket shows it). Auth: ``Bearer <token>``, else basic auth with
the username and password. ``info`` → ``SUCCESSFUL``, ``error`` → ``FAILED``; ``Progressing`` skipped.
TLS settings apply; the proxy does not (as in Flux).
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote, urlsplit, urlunsplit

from ...api.event import Event
from ...api.provider import ProviderType
from ...errors import FailureReason, PermanentDeliveryError, ProviderConfigError
from ...lib.gojson import GoStruct
from ...lib.goquote import quote as go_quote
from ...outbound import OutboundRequest
from ..base import ProviderOptions
from ..common import basic_auth, go_json, path_segment, str_field
from .base import (
    CommitStatus,
    CommitStatusNotifier,
    commit_sha,
    commit_status_id,
    format_name_and_description,
    is_progressing,
)
from .forges import sha1_hex

SCM = "/scm/"


def parse_bitbucket_server_address(address: str) -> str:
    """The ``.../commits`` URL of the repository (Flux's ``parseBitbucketServerGitAddress``); userinfo dropped."""
    try:
        parts = urlsplit(address)
        parts.port  # noqa: B018
    except ValueError as exc:
        raise ProviderConfigError("could not parse git address: invalid URL") from exc
    if parts.scheme not in ("http", "https"):
        raise ProviderConfigError(
            f"could not parse git address: unsupported scheme type in address: {parts.scheme}. Must be http or https"
        )
    path = parts.path
    if path.endswith(".git"):
        path = path[: -len(".git")]
    index = path.rfind(SCM)
    if index < 0:
        raise ProviderConfigError(
            "could not parse git address: supplied provider address is not http(s) git clone url"
        )
    context, repo_id = path[:index], path[index + len(SCM) :]
    comps = repo_id.split("/")
    if len(comps) != 2 or any(c in ("", ".", "..") for c in comps):
        raise ProviderConfigError(f"could not parse git address: invalid repository id {go_quote(repo_id)}")
    if not parts.hostname:
        raise ProviderConfigError("could not parse git address: the address has no host")
    netloc = parts.netloc.rpartition("@")[2]
    commits = (
        f"{context}/rest/api/latest/projects/{path_segment(comps[0])}/repos/{path_segment(comps[1])}/commits"
    )
    return urlunsplit((parts.scheme, netloc, commits, "", ""))


def without_userinfo(address: str) -> str:
    """The address as sent in the status ``url``: credentials in a clone URL never leave the controller."""
    parts = urlsplit(address)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def bitbucket_server_state(event: Event) -> str:
    if event.severity == "info":
        return "SUCCESSFUL"
    if event.severity == "error":
        return "FAILED"
    raise PermanentDeliveryError(
        "couldn't convert to bitbucket server state: bitbucket server state generated on info or error events only",
        reason="invalid_event",
        failure=FailureReason.INVALID_REQUEST,
    )


def duplicate_bitbucket_server_status(existing: Any, status: CommitStatus) -> bool:
    if not isinstance(existing, dict):
        return False
    return (
        (str_field(existing, "key") or "") == status.id
        and (str_field(existing, "state") or "") == status.state
        and (str_field(existing, "description") or "") == status.description
        and (str_field(existing, "name") or "") == status.name
    )


class BitbucketServerNotifier(CommitStatusNotifier):
    list_what: ClassVar[str] = (
        "could not get existing commit status: failed api call to check duplicate commit status"
    )
    create_what: ClassVar[str] = "could not post build status: could not post build commit status"
    missing_is_empty: ClassVar[bool] = True
    type: ClassVar[ProviderType] = ProviderType.BITBUCKET_SERVER
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        self.opts = opts
        self.commits_url = parse_bitbucket_server_address(opts.address)
        self.address = without_userinfo(opts.address)
        token, username, password = opts.token_text, opts.username, opts.password_text
        if not token and (not username or not password):
            raise ProviderConfigError(
                "invalid credentials, expected to be one of username/password or API Token"
            )
        self.authorization = f"Bearer {token}" if token else basic_auth(username, password)

    def _headers(self, *, body: bool = False) -> dict[str, str]:
        headers = {
            "Authorization": self.authorization,
            "x-atlassian-token": "no-check",
            "x-requested-with": "XMLHttpRequest",
        }
        if body:
            headers["Content-Type"] = "application/json"
        return headers

    def build_status(self, event: Event, commit_status: str = "") -> CommitStatus | None:
        if is_progressing(event):
            return None
        try:
            sha = commit_sha(event)
        except PermanentDeliveryError as exc:
            if str(exc) == "missing revision metadata":
                raise
            raise PermanentDeliveryError(
                f"could not parse revision: {exc}", reason=exc.reason, failure=exc.failure
            ) from None
        state = bitbucket_server_state(event)
        name, description = format_name_and_description(event)
        key = sha1_hex(commit_status_id(self.opts, event, commit_status))
        return CommitStatus(sha, state, description, key, f"{name} [{description}]")

    def builds_url(self, sha: str) -> str:
        return f"{self.commits_url}/{path_segment(sha)}/builds"

    def list_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        return OutboundRequest(
            "GET", f"{self.builds_url(status.sha)}?key={quote(status.id, safe='')}", self._headers()
        )

    def create_request(self, status: CommitStatus, token: str = "") -> OutboundRequest:
        payload = GoStruct()
        if status.description:
            payload["description"] = status.description
        payload["key"] = status.id
        if status.name:
            payload["name"] = status.name
        payload["state"] = status.state
        payload["url"] = self.address
        body = go_json(payload, newline=True)
        return OutboundRequest("POST", self.builds_url(status.sha), self._headers(body=True), body)

    def is_duplicate(self, existing: Any, status: CommitStatus) -> bool:
        return duplicate_bitbucket_server_status(existing, status)

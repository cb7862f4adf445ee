"""The git forges' API clients, shared by every provider type of a forge (commit status, PR/MR comments,
dispatch): repository addresses, headers, tokens. Type modules import this module, never each other
(the provider independence contract).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import quote

from ...errors import ProviderConfigError
from ...lib.goquote import quote as go_quote
from ..base import ProviderOptions
from ..common import path_segment, token_or_password
from .base import parse_git_address, require_web_host, split_repo_id
from .githubapp import github_api_base


@dataclass(frozen=True)
class GitHubRepo:
    """Owner, repository and the REST base URL of a GitHub repository address."""

    owner: str
    repo: str
    api_base: str
    enterprise: bool

    @classmethod
    def from_address(cls, address: str) -> GitHubRepo:
        parsed = parse_git_address(address)
        comps = split_repo_id(parsed.id, 2)
        if comps is None:
            raise ProviderConfigError(f"invalid repository id: '{parsed.id}'")
        require_web_host(parsed)
        return cls(comps[0], comps[1], github_api_base(parsed), parsed.hostname != "github.com")

    def url(self, *parts: str) -> str:
        return f"{self.api_base}repos/{path_segment(self.owner)}/{path_segment(self.repo)}/" + "/".join(parts)


@dataclass(frozen=True)
class GiteaRepo:
    host: str
    owner: str
    repo: str

    @classmethod
    def from_address(cls, address: str) -> GiteaRepo:
        parsed = parse_git_address(address)
        comps = split_repo_id(parsed.id, 2)
        if comps is None:
            raise ProviderConfigError(f"invalid repository id {go_quote(parsed.id)}")
        require_web_host(parsed)
        return cls(parsed.host, comps[0], comps[1])

    def url(self, *parts: str) -> str:
        return f"{self.host}/api/v1/repos/{path_segment(self.owner)}/{path_segment(self.repo)}/" + "/".join(
            parts
        )

    def api(self, path: str) -> str:
        return f"{self.host}/api/v1/{path}"


def gitea_token(opts: ProviderOptions) -> str:
    token = token_or_password(opts)
    if not token:
        raise ProviderConfigError("gitea token cannot be empty")
    return token


def gitea_headers(token: str, *, body: bool = False) -> dict[str, str]:
    headers = {"Accept": "application/json", "Authorization": f"token {token}"}
    if body:
        headers["Content-Type"] = "application/json"
    return headers


@dataclass(frozen=True)
class GitLabProject:
    """The REST base (``.../api/v4/``) and the URL-escaped project id of a GitLab repository address."""

    api_base: str
    project_id: str

    @classmethod
    def from_address(cls, address: str) -> GitLabProject:
        parsed = parse_git_address(address)
        if not parsed.id or any(seg in ("", ".", "..") for seg in parsed.id.split("/")):
            raise ProviderConfigError(f"invalid repository id {go_quote(parsed.id)}")
        require_web_host(parsed)
        return cls(f"{parsed.host}/api/v4/", parsed.id)

    def url(self, *parts: str) -> str:
        return f"{self.api_base}projects/{quote(self.project_id, safe='')}/" + "/".join(parts)


def gitlab_headers(token: str, *, body: bool = False) -> dict[str, str]:
    headers = {"Accept": "application/json", "PRIVATE-TOKEN": token}
    if body:
        headers["Content-Type"] = "application/json"
    return headers


def gitlab_token(opts: ProviderOptions) -> str:
    token = token_or_password(opts)
    if not token:
        raise ProviderConfigError("gitlab token cannot be empty")
    return token


def sha1_hex(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", errors="surrogateescape"), usedforsecurity=False).hexdigest()

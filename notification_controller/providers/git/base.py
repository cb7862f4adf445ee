"""What the git-forge providers share: repository addresses, revisions, states, commit-status ids, and
``CommitStatusNotifier`` (build -> list -> dedupe -> create, once for the six forges).

Reference §4.0 (``parseRevision``, ``formatNameAndDescription``, ``formatMarkdownPost``) and §4.2 (repository
address parsing, state mapping, skip rules). Everything here is pure except the notifier's ``post``.
"""

from __future__ import annotations

import abc
import dataclasses
import re
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

from ...api.event import MD_CHANGE_REQUEST, Event
from ...errors import (
    DeliveryError,
    FailureReason,
    PermanentDeliveryError,
    ProviderConfigError,
)
from ...lib.goquote import quote as go_quote
from ...outbound import OutboundRequest
from ..base import DeliveryContext, ProviderOptions
from ..common import Caller, is_not_found
from ..formatting import format_name_and_description as format_name_and_description  # re-export
from ..formatting import split_camelcase as split_camelcase  # re-export

PROGRESSING = "Progressing"
SEVERITY_INFO = "info"
SEVERITY_ERROR = "error"


# ----------------------------------------------------------------------------------------------------
# Repository addresses (reference §4.2)
# ----------------------------------------------------------------------------------------------------

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
# git-urls' scp-like syntax: [user@]host:[port/]path
_SCP_RE = re.compile(r"^(?:(?P<user>[^@]+)@)?(?P<host>[^:\s/]+):(?:(?P<port>[0-9]{1,5})/)?(?P<path>[^\\].*)$")


@dataclass(frozen=True)
class RepoAddress:
    """A parsed repository URL: ``host`` is ``<scheme>://<host[:port]>`` (ssh mapped to https), ``id`` the
    path without leading ``/`` and trailing ``.git``."""

    scheme: str
    netloc: str
    id: str

    @property
    def host(self) -> str:
        return f"{self.scheme}://{self.netloc}"

    @property
    def hostname(self) -> str:
        return (urlsplit(self.host).hostname or "").lower()


def parse_git_address(address: str) -> RepoAddress:
    """Flux's ``parseGitAddress``: https/http URLs, ``ssh://[user@]host/owner/repo`` and ``[user@]host:owner/repo``.

    Userinfo (``https://user:token@host``) is dropped and never echoed. Anything else (a local path,
    ``git://``, ``file://``) yields the ``file`` scheme with an empty host, which ``require_web_host`` rejects.
    """
    text = address.strip()
    if _SCHEME_RE.match(text):
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018  (raises ValueError on a bad port)
        except ValueError:
            return RepoAddress("invalid", "", "")
        scheme = parts.scheme.lower()
        netloc = parts.netloc.rpartition("@")[2]
        path = parts.path
    else:
        match = _SCP_RE.match(text)
        if match:
            scheme, netloc, path = "ssh", match.group("host"), match.group("path")
        else:
            scheme, netloc, path = "file", "", text
    if scheme == "ssh":
        scheme = "https"
    repo_id = path.lstrip("/")
    if repo_id.endswith(".git"):
        repo_id = repo_id[: -len(".git")]
    return RepoAddress(scheme, netloc, repo_id)


def require_web_host(repo: RepoAddress) -> None:
    """The API is reached over http(s): reject local paths, ``git://`` and hostless addresses."""
    if repo.scheme not in ("http", "https") or not repo.netloc:
        raise ProviderConfigError(
            "invalid repository address: expected an https://, http://, ssh:// or [user@]host:owner/repo URL"
        )


def split_repo_id(repo_id: str, parts: int) -> list[str] | None:
    """Split ``repo_id`` on ``/`` into exactly ``parts`` non-dot segments, or None."""
    comps = repo_id.split("/")
    if len(comps) != parts or any(c in (".", "..") for c in comps):
        return None
    return comps


# ----------------------------------------------------------------------------------------------------
# Events: revision, name/description, state
# ----------------------------------------------------------------------------------------------------


def parse_revision(rev: str) -> str:
    """Flux's ``parseRevision``: the commit SHA-1 of a revision string.

    ``main@sha1:<sha>`` and ``sha1:<sha>`` give the text after the last ``:``; the legacy ``<branch>/<sha>``
    gives the last segment; anything else is taken whole. The result must be 40 characters long.
    """
    if ":" in rev:
        sha = rev.rsplit(":", 1)[1]
    elif "/" in rev and len(rev.rsplit("/", 1)[1]) in (40, 64):
        sha = rev.rsplit("/", 1)[1]
    else:
        sha = rev
    if len(sha) != 40:
        raise PermanentDeliveryError(
            f"failed to extract commit hash from '{rev}' revision",
            reason="invalid_event",
            failure=FailureReason.INVALID_REQUEST,
        )
    return sha


def commit_sha(event: Event) -> str:
    """The commit of ``event`` (``GetRevision`` then ``parseRevision``)."""
    rev = event.revision()
    if rev is None:
        raise PermanentDeliveryError(
            "missing revision metadata", reason="invalid_event", failure=FailureReason.INVALID_REQUEST
        )
    return parse_revision(rev)


def is_progressing(event: Event) -> bool:
    return event.reason == PROGRESSING


def severity_state(event: Event, info: str, error: str, forge: str) -> str:
    """Map ``info``/``error`` to a forge's state; any other severity is an error (reference §4.2)."""
    if event.severity == SEVERITY_INFO:
        return info
    if event.severity == SEVERITY_ERROR:
        return error
    raise PermanentDeliveryError(
        f"can't convert to {forge} state", reason="invalid_event", failure=FailureReason.INVALID_REQUEST
    )


def default_commit_status(event: Event, provider_uid: str) -> str:
    """Flux's default commit status id: ``lower(<kind>/<name>/<first '-'-separated part of the Provider UID>)``."""
    obj = event.involved_object
    return f"{obj.kind}/{obj.name}/{provider_uid.split('-', 1)[0]}".lower()


def commit_status_id(opts: ProviderOptions, event: Event, commit_status: str = "") -> str:
    """The commit status id of a delivery (reference §3.6 step 9).

    The dispatcher computes it per notification (``spec.commitStatusExpr`` or the default formula,
    ``dispatch/rules.py``) and hands it over as ``DeliveryContext.commit_status``; without it (tools and
    tests) ``opts.commit_status``, then the default formula. With neither an id nor a Provider UID there is
    nothing to key the status on, as in Flux: ``commit status cannot be empty``.
    """
    if commit_status:
        return commit_status
    if opts.commit_status:
        return opts.commit_status
    if opts.uid:
        return default_commit_status(event, opts.uid)
    raise PermanentDeliveryError(
        "commit status cannot be empty", reason="invalid_config", failure=FailureReason.INVALID_CONFIG
    )


_GO_INT = re.compile(r"^[+-]?[0-9]+$")


# GitHub refuses a longer commit-status description ("maximum is 140 characters"); the smallest limit of
# the six forges, so one rule for all.
MAX_DESCRIPTION = 140


def status_description(text: str) -> str:
    """A template's message as a commit-status description: one line, at most ``MAX_DESCRIPTION``."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_DESCRIPTION else line[: MAX_DESCRIPTION - 1] + "…"


def format_markdown_post(event: Event, title: str | None = None) -> str:
    """Flux's ``formatMarkdownPost``: a Markdown status block with sorted metadata (``change_request`` excluded).
    ``title`` (a template's) replaces the ``Kind/namespace/name`` line."""
    emoji = "⚠️" if event.severity == SEVERITY_ERROR else "ℹ️"
    obj = event.involved_object
    lines = "".join(
        f"* `{key}`: {event.metadata[key]}\n" for key in sorted(event.metadata) if key != MD_CHANGE_REQUEST
    )
    head = title if title is not None else f"{obj.kind}/{obj.namespace}/{obj.name}"
    return f"## Flux Status\n\n{emoji} {head}\n\n{event.message}\n\nMetadata:\n{lines}"


def change_request_number(event: Event) -> int:
    """The PR/MR number of the event (``strconv.Atoi`` rules: optional sign, ASCII digits, int64 range)."""
    raw = event.metadata.get(MD_CHANGE_REQUEST)
    if raw is None:
        raise PermanentDeliveryError(
            f"missing {go_quote(MD_CHANGE_REQUEST)} metadata key",
            reason="invalid_event",
            failure=FailureReason.INVALID_REQUEST,
        )
    if not _GO_INT.match(raw):
        cause = f"strconv.Atoi: parsing {go_quote(raw)}: invalid syntax"
    else:
        value = int(raw)
        if -(2**63) <= value < 2**63:
            return value
        cause = f"strconv.Atoi: parsing {go_quote(raw)}: value out of range"
    raise PermanentDeliveryError(
        f"invalid {go_quote(MD_CHANGE_REQUEST)} metadata value {go_quote(raw)}: {cause}",
        reason="invalid_event",
        failure=FailureReason.INVALID_REQUEST,
    )


# ----------------------------------------------------------------------------------------------------
# The commit-status family: build -> list -> dedupe -> create, once
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitStatus:
    """What a forge is asked to show on a commit. ``id`` is the commit status id (GitHub's and Gitea's
    ``context``, GitLab's and Azure DevOps' ``name``; Bitbucket's ``key`` is its SHA-1); ``name`` is the
    display name where the forge has one (Bitbucket), ``genre`` Azure DevOps' context genre."""

    sha: str
    state: str
    description: str
    id: str
    name: str = ""
    genre: str = ""


class CommitStatusNotifier(abc.ABC):
    """A forge's commit status (reference §4.x): build the status, read what the forge has (one request),
    stop if the same status is already set, else create it — under one ``spec.timeout`` budget.

    A forge states its ``states`` (the info and error state names), the two requests, the duplicate rule
    and, when the API needs one minted per delivery, ``credential`` (a token); it overrides ``build_status``
    only where Flux builds the status differently. The flow and its error texts (``list_what``/
    ``create_what``, Flux's) live here. ``missing_is_empty``: the forge answers 404 when no status exists
    yet (Bitbucket reads one status by key).
    """

    opts: ProviderOptions
    forge: ClassVar[str]  # in "can't convert to <forge> state"
    states: ClassVar[tuple[str, str]]  # the forge's state for info and for error events
    skips_progressing: ClassVar[bool] = True  # a Progressing event sets no status (Gitea: ``pending``)
    list_what: ClassVar[str] = "could not list commit statuses"
    create_what: ClassVar[str] = "could not create commit status"
    missing_is_empty: ClassVar[bool] = False
    api_proxy: ClassVar[bool] = False  # the forge API through spec.proxy (Gitea)

    def state(self, event: Event) -> str:
        return severity_state(event, *self.states, self.forge)

    def build_status(self, event: Event, commit_status: str = "") -> CommitStatus | None:
        """The status for ``event``, or None when the event sets none (``Progressing``)."""
        if self.skips_progressing and is_progressing(event):
            return None
        sha = commit_sha(event)
        state = self.state(event)
        name, description = format_name_and_description(event)
        return CommitStatus(sha, state, description, commit_status_id(self.opts, event, commit_status), name)

    @abc.abstractmethod
    def list_request(self, status: CommitStatus, token: str = "") -> OutboundRequest: ...

    @abc.abstractmethod
    def create_request(self, status: CommitStatus, token: str = "") -> OutboundRequest: ...

    @abc.abstractmethod
    def is_duplicate(self, existing: Any, status: CommitStatus) -> bool:
        """Whether the forge's answer to ``list_request`` already holds ``status``."""

    def api_tls(self) -> bool:
        """Whether the API requests use the Provider's TLS material (``certSecretRef``)."""
        return True

    async def credential(self, call: Caller) -> str:
        """A token minted for this delivery ("" when the options carry the credential)."""
        return ""

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        status = self.build_status(event, ctx.commit_status)
        if status is None:
            return
        template = ctx.template
        if template is not None:  # an Alert template: its message is the description
            status = dataclasses.replace(status, description=status_description(template.text))
        call = Caller(ctx, self.opts)
        token = await self.credential(call)
        proxy, tls = self.api_proxy, self.api_tls()
        try:
            existing = await call.send_json(
                self.list_request(status, token), what=self.list_what, proxy=proxy, tls=tls
            )
        except DeliveryError as exc:
            if not (self.missing_is_empty and is_not_found(exc)):
                raise
            existing = None
        if self.is_duplicate(existing, status):
            return
        await call.send(self.create_request(status, token), what=self.create_what, proxy=proxy, tls=tls)

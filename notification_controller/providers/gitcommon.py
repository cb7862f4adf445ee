"""Shared helpers of the git-forge providers (commit statuses, change-request comments, dispatch).

Reference §4.0 (``parseRevision``, ``formatNameAndDescription``, ``formatMarkdownPost``) and §4.2 (repository
address parsing, state mapping, skip rules). Everything here is pure except ``Caller``, the thin wrapper
that sends a forge's several requests (list, then create) through the one ``OutboundHTTP`` path under a
single time budget (``spec.timeout`` covers the whole delivery, as Flux's context deadline does).
"""

from __future__ import annotations

import abc
import base64
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar
from urllib.parse import quote, urlsplit

from ..api.event import MD_CHANGE_REQUEST, Event
from ..core.gojson import dumps as go_dumps
from ..errors import (
    DeliveryError,
    PermanentDeliveryError,
    ProviderConfigError,
    RetryableDeliveryError,
)
from ..outbound import Budget, OutboundRequest, OutboundResponse, masked
from .base import DeliveryContext, ProviderOptions
from .formatting import format_name_and_description as format_name_and_description  # re-export
from .formatting import split_camelcase as split_camelcase  # re-export

PROGRESSING = "Progressing"
SEVERITY_INFO = "info"
SEVERITY_ERROR = "error"

# ----------------------------------------------------------------------------------------------------
# Go formatting
# ----------------------------------------------------------------------------------------------------

_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's ``%q`` (``strconv.Quote``): a double-quoted string with Go escapes, printable runes kept."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x80:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_json(value: Any, *, escape_html: bool = True, newline: bool = False) -> bytes:
    """JSON as Go writes it. ``escape_html=False, newline=True`` is a ``json.Encoder`` with
    ``SetEscapeHTML(false)`` (go-github); the defaults are ``json.Marshal`` (gitea, gitlab, bitbucket SDKs)."""
    if escape_html:
        body = go_dumps(value)
    else:
        body = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8", errors="replace"
        )
    return body + b"\n" if newline else body


def basic_auth(username: str, password: str) -> str:
    """The value of an ``Authorization: Basic`` header (Go's ``SetBasicAuth``)."""
    raw = f"{username}:{password}".encode("utf-8", errors="surrogateescape")
    return "Basic " + base64.b64encode(raw).decode("ascii")


def path_segment(text: str) -> str:
    """Escape one URL path segment (``owner``, ``repo``, a SHA...)."""
    return quote(text, safe="-._~!$&'()*+,;=:@")


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
            f"failed to extract commit hash from '{rev}' revision", reason="invalid_event"
        )
    return sha


def commit_sha(event: Event) -> str:
    """The commit of ``event`` (``GetRevision`` then ``parseRevision``)."""
    rev = event.revision()
    if rev is None:
        raise PermanentDeliveryError("missing revision metadata", reason="invalid_event")
    return parse_revision(rev)


def is_progressing(event: Event) -> bool:
    return event.reason == PROGRESSING


def severity_state(event: Event, info: str, error: str, forge: str) -> str:
    """Map ``info``/``error`` to a forge's state; any other severity is an error (reference §4.2)."""
    if event.severity == SEVERITY_INFO:
        return info
    if event.severity == SEVERITY_ERROR:
        return error
    raise PermanentDeliveryError(f"can't convert to {forge} state", reason="invalid_event")


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
    raise PermanentDeliveryError("commit status cannot be empty", reason="invalid_config")


def token_or_password(opts: ProviderOptions) -> str:
    """The Secret's ``token``, else its ``password`` (GitHub, GitLab, Gitea fallback)."""
    return opts.token_text or opts.password_text


# ----------------------------------------------------------------------------------------------------
# Change requests (reference §4.3)
# ----------------------------------------------------------------------------------------------------

_GO_INT = re.compile(r"^[+-]?[0-9]+$")


def format_markdown_post(event: Event) -> str:
    """Flux's ``formatMarkdownPost``: a Markdown status block with sorted metadata (``change_request`` excluded)."""
    emoji = "⚠️" if event.severity == SEVERITY_ERROR else "ℹ️"
    obj = event.involved_object
    lines = "".join(
        f"* `{key}`: {event.metadata[key]}\n" for key in sorted(event.metadata) if key != MD_CHANGE_REQUEST
    )
    return f"## Flux Status\n\n{emoji} {obj.kind}/{obj.namespace}/{obj.name}\n\n{event.message}\n\nMetadata:\n{lines}"


def change_request_number(event: Event) -> int:
    """The PR/MR number of the event (``strconv.Atoi`` rules: optional sign, ASCII digits, int64 range)."""
    raw = event.metadata.get(MD_CHANGE_REQUEST)
    if raw is None:
        raise PermanentDeliveryError(
            f"missing {go_quote(MD_CHANGE_REQUEST)} metadata key", reason="invalid_event"
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
    )


# ----------------------------------------------------------------------------------------------------
# Sending several requests under one budget
# ----------------------------------------------------------------------------------------------------


def rewrap(exc: DeliveryError, prefix: str) -> DeliveryError:
    """The same error (kind, reason, failure, status, body) with ``prefix: `` in front of its message."""
    message = f"{prefix}: {exc}"
    reason, failure, status, body = exc.reason, exc.failure, exc.status, exc.body
    if isinstance(exc, RetryableDeliveryError):
        return RetryableDeliveryError(
            message, reason=reason, failure=failure, status=status, body=body, retry_after=exc.retry_after
        )
    cls = PermanentDeliveryError if isinstance(exc, PermanentDeliveryError) else DeliveryError
    return cls(message, reason=reason, failure=failure, status=status, body=body)


def is_not_found(exc: DeliveryError) -> bool:
    """True when the error is the answer 404."""
    return exc.status == 404


class Caller:
    """Sends one delivery's requests through ``ctx.http`` within ``opts.timeout`` seconds in total.

    Every failure is re-raised with a Flux-like prefix (``could not list commit statuses: ...``) and is
    masked with the provider's secrets plus any credential minted during the delivery (``add_mask``).
    """

    def __init__(self, ctx: DeliveryContext, opts: ProviderOptions) -> None:
        self.ctx = ctx
        self.opts = opts
        self._budget = Budget(opts.timeout)
        self._masks: list[str] = list(opts.masks())

    @property
    def masks(self) -> Sequence[str]:
        return tuple(self._masks)

    def add_mask(self, *values: str) -> None:
        self._masks.extend(v for v in values if v and len(v.strip()) >= 4)

    def mask(self, text: str) -> str:
        return masked(text, self._masks)

    async def send(
        self,
        request: OutboundRequest,
        *,
        what: str,
        proxy: bool = False,
        tls: bool = True,
        check: Callable[[OutboundResponse], None] | None = None,
    ) -> OutboundResponse:
        remaining = self._budget.remaining(what)
        opts = self.opts
        try:
            return await self.ctx.http.send(
                request,
                timeout=remaining,
                proxy=opts.proxy.reveal() if (proxy and opts.proxy) else None,
                tls=opts.tls if tls else None,
                masks=self._masks,
                check=check,
            )
        except DeliveryError as exc:
            raise rewrap(exc, what) from None

    async def send_json(
        self, request: OutboundRequest, *, what: str, proxy: bool = False, tls: bool = True
    ) -> Any:
        """``send`` and decode a JSON answer (an empty body is ``None``)."""
        response = await self.send(request, what=what, proxy=proxy, tls=tls)
        return decode_json(response, what)


def decode_json(response: OutboundResponse, what: str) -> Any:
    if not response.body.strip():
        return None
    try:
        return json.loads(response.body)
    except (ValueError, RecursionError):
        raise PermanentDeliveryError(
            f"{what}: the response is not valid JSON", reason="invalid_response"
        ) from None


def json_list(value: Any) -> list[dict[str, Any]]:
    """The dict items of a JSON array (anything else counts as an empty listing)."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def str_field(item: dict[str, Any], *path: str) -> str | None:
    """A nested string field of a JSON object, or None when absent or not a string."""
    value: Any = item
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value if isinstance(value, str) else None


# ----------------------------------------------------------------------------------------------------
# The commit-status family: list -> dedupe -> create, once
# ----------------------------------------------------------------------------------------------------

S = TypeVar("S")


class CommitStatusNotifier(abc.ABC, Generic[S]):
    """A forge's commit status (reference §4.x): build the status, read what the forge has (one request),
    stop if the same status is already set, else create it — under one ``spec.timeout`` budget.

    A forge supplies the status it wants (``build_status``), the two requests, the duplicate rule and,
    when the API needs one minted per delivery, ``credential`` (a token); the flow and its error texts
    (``list_what``/``create_what``, Flux's) live here. ``missing_is_empty``: the forge answers 404 when no
    status exists yet (Bitbucket reads one status by key).
    """

    opts: ProviderOptions
    list_what: ClassVar[str] = "could not list commit statuses"
    create_what: ClassVar[str] = "could not create commit status"
    missing_is_empty: ClassVar[bool] = False
    api_proxy: ClassVar[bool] = False  # the forge API through spec.proxy (Gitea)

    @abc.abstractmethod
    def build_status(self, event: Event, commit_status: str = "") -> S | None:
        """The status for ``event``, or None when the event sets none (``Progressing``)."""

    @abc.abstractmethod
    def list_request(self, status: S, token: str = "") -> OutboundRequest: ...

    @abc.abstractmethod
    def create_request(self, status: S, token: str = "") -> OutboundRequest: ...

    @abc.abstractmethod
    def is_duplicate(self, existing: Any, status: S) -> bool:
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

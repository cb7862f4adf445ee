"""GitHub authentication shared by ``github``, ``githubdispatch`` and ``githubpullrequestcomment``.

Reference §4.2 "GitHub auth": the Secret's ``token``, else its ``password``, else a GitHub App
(``githubAppID``, ``githubAppInstallationID`` or ``githubAppInstallationOwner``, ``githubAppPrivateKey``,
optional ``githubAppBaseURL``), as ``fluxcd/pkg/git/github`` does it:

1. mint an app JWT (RS256, ``iat`` 60 s in the past for clock drift, ``exp`` 10 minutes after ``iat``,
   ``iss`` = app id);
2. with ``githubAppInstallationOwner``, find the installation: ``GET {base}orgs/{owner}/installation``,
   then ``GET {base}users/{owner}/installation``;
3. optionally learn the app slug (``GET {base}app``): comments posted by an app appear as ``<slug>[bot]``;
4. exchange the JWT for an installation token: ``POST {base}app/installations/{id}/access_tokens``.

``{base}`` is ``githubAppBaseURL`` (with a trailing ``/``) or ``https://api.github.com/``. Tokens are reused
from the dispatcher's ``TokenCache`` (``DeliveryContext.tokens``) until shortly before they expire; without a
cache every delivery mints a new one. The configuration is validated when the notifier is built (with
Flux's messages); the exchange happens at delivery time, inside the delivery's time budget.

The API base URL of the repository calls derives from the address host (go-github's rules): ``github.com``
→ ``https://api.github.com/``; any other host → ``<scheme>://<host>/api/v3/`` unless the host starts with
``api.`` or contains ``.api.`` (GitHub Enterprise Cloud with data residency). An ``http://`` address keeps
``http`` (test servers, plain-HTTP enterprise proxies).

An installation token is minted at the app's API (``{base}``) and is only valid there, so it is sent only
to that API: the repository API derived from the address must be on the same origin (scheme, host, port)
as ``{base}``, or on the host without ``api.`` (``api.github.com`` for ``github.com``, ``api.<x>.ghe.com``
for ``<x>.ghe.com``). Otherwise the Provider is not Ready (``token_destination``): a token minted for one
GitHub is never shown to another host, even by mistake (Flux's client does not check; the key is the
tenant's, but the cache may hold a token minted for a key another Provider shares).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from ...errors import FailureReason, PermanentDeliveryError, ProviderConfigError
from ...outbound import OutboundRequest
from ...outbound.tokens import CachedToken, TokenCache, cache_key, mint_or_cached
from ..base import ProviderOptions
from ..common import Caller, path_segment, str_field, token_or_password
from ..validation import require_url
from .base import RepoAddress, parse_git_address

KEY_APP_ID = "githubAppID"
KEY_INSTALLATION_ID = "githubAppInstallationID"
KEY_INSTALLATION_OWNER = "githubAppInstallationOwner"
KEY_PRIVATE_KEY = "githubAppPrivateKey"
KEY_BASE_URL = "githubAppBaseURL"

DEFAULT_APP_BASE = "https://api.github.com/"
GITHUB_ACCEPT = "application/vnd.github.v3+json"
GITHUB_API_VERSION = "2022-11-28"
JWT_BACKDATE = 60
JWT_LIFETIME = 600


def github_api_base(repo: RepoAddress) -> str:
    """The REST base URL (ending in ``/``) for a repository address (go-github ``WithEnterpriseURLs``)."""
    if repo.hostname == "github.com":
        return "https://api.github.com/"
    host = repo.netloc.lower()
    if host.startswith("api.") or ".api." in host:
        return f"{repo.scheme}://{repo.netloc}/"
    return f"{repo.scheme}://{repo.netloc}/api/v3/"


def token_destination_error(app_base: str, api_base: str) -> str | None:
    """Why an installation token minted at ``app_base`` must not go to ``api_base`` (None: it may)."""
    app, api = urlsplit(app_base), urlsplit(api_base)
    app_host, api_host = app.netloc.lower(), api.netloc.lower()
    if app.scheme.lower() == api.scheme.lower() and app_host in (api_host, f"api.{api_host}"):
        return None
    return (
        f"the GitHub App's API ({app.scheme}://{app.hostname}) does not serve the repository's "
        f"({api.scheme}://{api.hostname}): its installation token is only sent to the API that minted it; "
        f"set '{KEY_BASE_URL}' in the Secret to the repository's GitHub API"
    )


def github_headers(token: str, *, body: bool = False) -> dict[str, str]:
    headers = {
        "Accept": GITHUB_ACCEPT,
        "Authorization": f"Bearer {token}",
        "X-GitHub-Api-Version": GITHUB_API_VERSION,
    }
    if body:
        headers["Content-Type"] = "application/json"
    return headers


def _parse_int(raw: bytes | None) -> int:
    """``strconv.ParseInt`` with the error ignored (Flux's ``WithAppData``): 0 when absent or invalid."""
    if raw is None:
        return 0
    text = raw.decode("utf-8", errors="replace")
    try:
        return int(text, 10) if text.lstrip("+-").isdigit() and text.isascii() else 0
    except ValueError:
        return 0


@dataclass(frozen=True)
class GitHubApp:
    """A validated GitHub App configuration from the Secret (no I/O)."""

    app_id: int
    installation_id: int
    installation_owner: str
    private_key_pem: bytes
    private_key: RSAPrivateKey
    base_url: str
    base_url_raw: str

    def __repr__(self) -> str:
        return f"GitHubApp(app_id={self.app_id}, installation_id={self.installation_id}, base_url={self.base_url!r})"

    @classmethod
    def from_secret(cls, data: dict[str, bytes] | Any) -> GitHubApp:
        app_id = _parse_int(data.get(KEY_APP_ID))
        owner = (data.get(KEY_INSTALLATION_OWNER) or b"").decode("utf-8", errors="replace")
        installation_id = _parse_int(data.get(KEY_INSTALLATION_ID))
        key_pem = data.get(KEY_PRIVATE_KEY) or b""
        base_raw = (data.get(KEY_BASE_URL) or b"").decode("utf-8", errors="replace")
        if app_id == 0:
            raise ProviderConfigError("app ID must be provided to use github app authentication")
        if not owner and installation_id == 0:
            raise ProviderConfigError(
                "app installation owner or ID must be provided to use github app authentication"
            )
        if owner and installation_id != 0:
            raise ProviderConfigError(
                "only one of app installation owner or ID must be provided to use github app authentication"
            )
        if not key_pem:
            raise ProviderConfigError("private key must be provided to use github app authentication")
        try:
            key = load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ProviderConfigError(
                "could not parse private key: invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key"
            ) from exc
        except UnsupportedAlgorithm as exc:
            raise ProviderConfigError(
                "could not parse private key: key is not a valid RSA private key"
            ) from exc
        if not isinstance(key, RSAPrivateKey):
            raise ProviderConfigError("could not parse private key: key is not a valid RSA private key")
        base = base_raw.strip()
        if base:
            require_url(base, what=f"'{KEY_BASE_URL}' in the Secret")
            if not base.endswith("/"):
                base += "/"
        else:
            base = DEFAULT_APP_BASE
        return cls(app_id, installation_id, owner, key_pem, key, base, base_raw)

    def mint_jwt(self, now: float | None = None) -> str:
        """The app JWT: RS256, ``iat`` = now - 60 s, ``exp`` = ``iat`` + 10 min, ``iss`` = app id."""
        issued = int(now if now is not None else time.time()) - JWT_BACKDATE
        claims = {"iat": issued, "exp": issued + JWT_LIFETIME, "iss": str(self.app_id)}
        return jwt.encode(claims, self.private_key, algorithm="RS256")

    def cache_key(self, reflect_slug: bool) -> str:
        return cache_key(
            "github-app",
            str(self.app_id),
            self.installation_owner,
            str(self.installation_id),
            self.base_url_raw,
            self.private_key_pem,
            str(reflect_slug),
        )

    # Pure request builders ---------------------------------------------------------------------------

    def app_request(self, app_jwt: str) -> OutboundRequest:
        return OutboundRequest("GET", f"{self.base_url}app", github_headers(app_jwt))

    def installation_requests(self, app_jwt: str) -> list[OutboundRequest]:
        owner = path_segment(self.installation_owner)
        return [
            OutboundRequest("GET", f"{self.base_url}orgs/{owner}/installation", github_headers(app_jwt)),
            OutboundRequest("GET", f"{self.base_url}users/{owner}/installation", github_headers(app_jwt)),
        ]

    def access_token_request(self, app_jwt: str, installation_id: int) -> OutboundRequest:
        return OutboundRequest(
            "POST",
            f"{self.base_url}app/installations/{installation_id}/access_tokens",
            github_headers(app_jwt),
        )

    # I/O ---------------------------------------------------------------------------------------------

    async def installation_token(self, call: Caller, *, reflect_slug: bool) -> CachedToken:
        """Mint (or reuse) an installation token; ``extra["slug"]`` is the app slug when asked for."""
        cache = call.ctx.tokens if isinstance(call.ctx.tokens, TokenCache) else None

        async def mint() -> CachedToken:
            app_jwt = self.mint_jwt()
            call.add_mask(app_jwt)
            slug = ""
            if reflect_slug:
                app = await call.send_json(
                    self.app_request(app_jwt), what="failed to get app information", proxy=True
                )
                slug = (str_field(app, "slug") if isinstance(app, dict) else None) or ""
            installation_id = self.installation_id or await self._find_installation(call, app_jwt)
            answer = await call.send_json(
                self.access_token_request(app_jwt, installation_id),
                what="failed to create GitHub App installation token",
                proxy=True,
            )
            token = str_field(answer, "token") if isinstance(answer, dict) else None
            if not token:
                raise PermanentDeliveryError(
                    "failed to create GitHub App installation token: the answer has no token",
                    reason="invalid_response",
                    failure=FailureReason.AUTH,
                )
            call.add_mask(token)
            expires_raw = str_field(answer, "expires_at") if isinstance(answer, dict) else None
            return CachedToken(token, _expiry(expires_raw), {"slug": slug} if slug else {})

        token = await mint_or_cached(cache, self.cache_key(reflect_slug), mint)
        call.add_mask(token.value)
        return token

    async def _find_installation(self, call: Caller, app_jwt: str) -> int:
        errors: list[str] = []
        for request, what in zip(
            self.installation_requests(app_jwt),
            ("failed to find organization installation", "failed to find user installation"),
            strict=True,
        ):
            try:
                found = await call.send_json(request, what=what, proxy=True)
            except PermanentDeliveryError as exc:
                errors.append(str(exc))
                continue
            installation = found.get("id") if isinstance(found, dict) else None
            if isinstance(installation, int) and not isinstance(installation, bool) and installation > 0:
                return installation
            errors.append(f"{what}: the answer has no installation id")
        raise PermanentDeliveryError(
            "\n".join(errors), reason="github_app_installation", failure=FailureReason.AUTH
        )


def _expiry(raw: str | None) -> float:
    """``expires_at`` (RFC 3339) as a Unix time; one hour from now when absent or unparsable (GitHub's TTL)."""
    if raw:
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time() + 3600


@dataclass(frozen=True)
class GitHubToken:
    token: str
    app_slug: str = ""

    def __repr__(self) -> str:
        return f"GitHubToken(token='***', app_slug={self.app_slug!r})"


class GitHubAuth:
    """Token, else password, else GitHub App. Validated at construction; the app token is minted at delivery."""

    def __init__(self, opts: ProviderOptions, *, reflect_slug: bool = False) -> None:
        self.static = token_or_password(opts)
        self.reflect_slug = reflect_slug
        self.app: GitHubApp | None = None
        if not self.static:
            if KEY_APP_ID not in opts.secret_data:
                raise ProviderConfigError("github token or github app details must be specified")
            self.app = GitHubApp.from_secret(opts.secret_data)
            try:
                repo = parse_git_address(opts.address)
            except ProviderConfigError:
                return  # the notifier's own address check reports it
            if repo.scheme in ("http", "https") and repo.netloc:
                why = token_destination_error(self.app.base_url, github_api_base(repo))
                if why is not None:
                    raise ProviderConfigError(why)

    async def token(self, call: Caller) -> GitHubToken:
        if self.app is None:
            return GitHubToken(self.static)
        minted = await self.app.installation_token(call, reflect_slug=self.reflect_slug)
        return GitHubToken(minted.value, minted.extra.get("slug", ""))

"""OIDC ID-token verification for ``generic-oidc`` and ``gcr``: discovery, JWKS with a TTL cache, signature, claims.

Flux uses coreos/go-oidc (``generic-oidc``, reference §5.6) and Google's ``idtoken`` package (``gcr``). This
module reproduces their checks with PyJWT for the signature only, so the claim checks (and their messages)
stay go-oidc's:

* discovery ``<issuer>/.well-known/openid-configuration``; the document's ``issuer`` must equal the issuer;
* the token's ``alg`` must be asymmetric (RS/PS/ES 256-512, EdDSA) and, when the provider advertises
  ``id_token_signing_alg_values_supported``, one of those (go-oidc defaults to RS256 otherwise); ``none`` and
  HMAC algorithms are always refused — a public key must never be usable as an HMAC secret;
* the key is chosen by ``kid`` (every key is tried when the token has none); an unknown ``kid`` refreshes the
  key set once (at most every ``min_refresh`` seconds, so a flood of bogus kids cannot hammer the issuer);
* ``iss`` must equal the expected issuer, ``aud`` contain the audience, ``exp`` be in the future (no leeway,
  as go-oidc), ``nbf`` at most 5 minutes ahead (go-oidc's allowed skew).

Differences from Flux, on purpose: discovery documents and key sets are cached for ``ttl`` seconds (Flux
fetches both on every request); responses are capped at ``max_document_bytes`` and fetched with a timeout.
The cache is an instance owned by the receiver server (never a module global), so tests and servers each
own theirs. Only issuers configured on a Receiver (or the fixed Google key set) are ever fetched: the
unverified ``iss`` of a token selects among configured providers, it never becomes a URL by itself.

PyJWT is imported on the first key set or token, not with this module (issue 17): with it comes
``cryptography`` (~10 MB of RSS, most of it its Rust extension), which a controller serving no
``generic-oidc``/``gcr`` Receiver never needs. Both are declared dependencies; a missing one fails that
first verification with its ``ModuleNotFoundError``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from ..errors import ControllerError, DeliveryError
from ..lib.clock import Clock
from ..outbound import OutboundHTTP, OutboundRequest, RetryPolicy

ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
DEFAULT_ALGORITHMS = frozenset({"RS256"})
NBF_SKEW_SECONDS = 300.0
WELL_KNOWN = "/.well-known/openid-configuration"


class OIDCError(ControllerError):
    """A token or a provider failed a check. The message is safe to log (no token content)."""


@dataclass(frozen=True)
class Discovery:
    issuer: str
    jwks_uri: str
    algorithms: frozenset[str]


@dataclass
class _KeySet:
    keys: list[tuple[str | None, Any]]  # (kid, cryptography public key)
    fetched_at: float


def unverified_claims(token: str) -> dict[str, Any]:
    """The payload of a JWT without verifying it (to pick the provider by ``iss``). Flux's messages."""
    parts = token.split(".")
    if len(parts) != 3:
        raise OIDCError("token is not a JWT")
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        if "=" in parts[1]:
            raise ValueError("padded")
        claims = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise OIDCError("token payload is not base64url-encoded JSON") from None
    if not isinstance(claims, dict):
        raise OIDCError("token payload is not a JSON object")
    return claims


class OIDCClient:
    """Fetches and caches discovery documents and key sets; verifies ID tokens."""

    def __init__(
        self,
        clock: Clock,
        *,
        ttl: float = 300.0,
        timeout: float = 10.0,
        max_document_bytes: int = 1 << 20,
        min_refresh: float = 10.0,
        http: OutboundHTTP | None = None,
    ) -> None:
        self._clock = clock
        self.ttl = ttl
        self.timeout = timeout
        self.max_document_bytes = max_document_bytes
        self.min_refresh = min_refresh
        self._http = http  # the app's outbound path: its proxies (HTTPS_PROXY/NO_PROXY), TLS and limits
        self._own_http = http is None
        self._discovery: dict[str, tuple[Discovery, float]] = {}
        self._keysets: dict[str, _KeySet] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.fetches = 0  # number of HTTP fetches made (observability and tests)

    async def close(self) -> None:
        if self._own_http and self._http is not None:
            await self._http.close()
            self._http = None

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _get_json(self, url: str) -> Any:
        if self._http is None:  # used on its own (tests, tools): a private outbound path
            self._http = OutboundHTTP(RetryPolicy(max_attempts=1))
            self._own_http = True
            await self._http.start()
        self.fetches += 1
        request = OutboundRequest("GET", url, {"Accept": "application/json"})
        try:
            response = await self._http.send(
                request, timeout=self.timeout, retry=False, body_limit=self.max_document_bytes + 1
            )
        except DeliveryError as exc:
            if exc.status is not None:
                raise OIDCError(f"{url}: unexpected status {exc.status}") from None
            raise OIDCError(f"{url}: fetch failed: {exc.failure.value}") from None
        body = response.body
        if response.status != 200:
            raise OIDCError(f"{url}: unexpected status {response.status}")
        if len(body) > self.max_document_bytes:
            raise OIDCError(f"{url}: document larger than {self.max_document_bytes} bytes")
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise OIDCError(f"{url}: invalid JSON") from None

    async def discover(self, issuer: str) -> Discovery:
        """OIDC discovery for ``issuer`` (cached for ``ttl``)."""
        now = self._clock.monotonic()
        cached = self._discovery.get(issuer)
        if cached is not None and now - cached[1] < self.ttl:
            return cached[0]
        async with self._lock("d:" + issuer):
            cached = self._discovery.get(issuer)
            if cached is not None and self._clock.monotonic() - cached[1] < self.ttl:
                return cached[0]
            doc = await self._get_json(issuer.rstrip("/") + WELL_KNOWN)
            if not isinstance(doc, dict):
                raise OIDCError("oidc: discovery document is not a JSON object")
            got = doc.get("issuer")
            if got != issuer:
                raise OIDCError(
                    f"oidc: issuer did not match the issuer returned by provider, expected {issuer!r} got {got!r}"
                )
            jwks_uri = doc.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri:
                raise OIDCError("oidc: discovery document has no jwks_uri")
            advertised = doc.get("id_token_signing_alg_values_supported")
            algs = (
                frozenset(a for a in advertised if a in ASYMMETRIC_ALGORITHMS)
                if isinstance(advertised, list)
                else frozenset()
            )
            discovery = Discovery(issuer, jwks_uri, algs or DEFAULT_ALGORITHMS)
            self._discovery[issuer] = (discovery, self._clock.monotonic())
            return discovery

    async def _keys(self, url: str, *, refresh: bool = False) -> _KeySet:
        now = self._clock.monotonic()
        cached = self._keysets.get(url)
        if cached is not None and now - cached.fetched_at < self.ttl:
            if not refresh or now - cached.fetched_at < self.min_refresh:
                return cached
        async with self._lock("k:" + url):
            cached = self._keysets.get(url)
            now = self._clock.monotonic()
            if cached is not None and now - cached.fetched_at < (self.min_refresh if refresh else self.ttl):
                return cached
            doc = await self._get_json(url)
            import jwt  # on first use (see the module docstring)

            keys: list[tuple[str | None, Any]] = []
            for item in doc.get("keys", []) if isinstance(doc, dict) else []:
                if not isinstance(item, dict) or item.get("use", "sig") != "sig":
                    continue
                try:
                    keys.append(
                        (item.get("kid") if isinstance(item.get("kid"), str) else None, jwt.PyJWK(item).key)
                    )
                except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError, KeyError):
                    continue  # an unusable key (unknown kty, bad encoding) is skipped, as go-jose does
            keyset = _KeySet(keys, now)
            self._keysets[url] = keyset
            return keyset

    async def verify(
        self,
        token: str,
        *,
        jwks_url: str,
        algorithms: frozenset[str],
        issuers: frozenset[str],
        audience: str,
        now: datetime,
    ) -> dict[str, Any]:
        """Verify signature, ``iss`` ∈ issuers, ``aud`` ∋ audience, ``exp``, ``nbf``. Returns the claims."""
        import jwt  # on first use (see the module docstring)

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise OIDCError("oidc: malformed jwt header") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in algorithms or alg not in ASYMMETRIC_ALGORITHMS:
            raise OIDCError(
                f"oidc: id token signed with unsupported algorithm, expected {sorted(algorithms)} got {alg!r}"
            )
        kid = header.get("kid") if isinstance(header.get("kid"), str) else None

        payload = await self._verify_signature(token, jwks_url, alg, kid)
        if payload is None:
            keyset = await self._keys(jwks_url, refresh=True)  # rotated keys: refetch once, rate limited
            payload = self._try_keys(token, keyset, alg, kid)
        if payload is None:
            raise OIDCError("failed to verify signature: failed to verify id token signature")
        try:
            claims = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise OIDCError("oidc: failed to unmarshal claims") from None
        if not isinstance(claims, dict):
            raise OIDCError("oidc: failed to unmarshal claims")
        check_claims(claims, issuers=issuers, audience=audience, now=now)
        return claims

    async def _verify_signature(self, token: str, url: str, alg: str, kid: str | None) -> bytes | None:
        return self._try_keys(token, await self._keys(url), alg, kid)

    @staticmethod
    def _try_keys(token: str, keyset: _KeySet, alg: str, kid: str | None) -> bytes | None:
        candidates = [k for k_id, k in keyset.keys if kid is None or k_id == kid]
        import jwt  # on first use (see the module docstring)

        for key in candidates:
            try:
                decoded = jwt.PyJWS().decode_complete(token, key=key, algorithms=[alg])
            except (jwt.PyJWTError, ValueError, TypeError):
                continue
            payload = decoded.get("payload")
            if isinstance(payload, bytes):
                return payload
        return None


def check_claims(claims: dict[str, Any], *, issuers: frozenset[str], audience: str, now: datetime) -> None:
    """go-oidc's ``IDTokenVerifier.Verify`` claim checks (after the signature)."""
    iss = claims.get("iss")
    if iss not in issuers:
        expected = next(iter(issuers)) if len(issuers) == 1 else sorted(issuers)
        raise OIDCError(f"oidc: id token issued by a different provider, expected {expected!r} got {iss!r}")
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if audience not in [a for a in audiences if isinstance(a, str)]:
        raise OIDCError(f"oidc: expected audience {audience!r} got {audiences!r}")
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise OIDCError("oidc: token has no valid 'exp' claim")
    timestamp = now.timestamp()
    if exp < timestamp:
        expiry = datetime.fromtimestamp(exp, UTC).isoformat()
        raise OIDCError(f"oidc: token is expired (Token Expiry: {expiry})")
    nbf = claims.get("nbf")
    if isinstance(nbf, int | float) and not isinstance(nbf, bool) and timestamp + NBF_SKEW_SECONDS < nbf:
        raise OIDCError("oidc: current time before the nbf (not before) time")


def bearer_token(value: bytes | None) -> str:
    """``Authorization: Bearer <token>`` → token (Flux's messages). Malformed bytes → error, never a crash."""
    prefix = b"Bearer "
    if value is None or not value.startswith(prefix):
        raise OIDCError("the Authorization header is missing or malformed")
    raw = value[len(prefix) :].strip()
    if not raw:
        raise OIDCError("the Authorization header is missing a bearer token")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise OIDCError("the bearer token is not ASCII") from None

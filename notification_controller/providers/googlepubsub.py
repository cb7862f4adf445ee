"""``googlepubsub``: publish the event JSON to a Google Cloud Pub/Sub topic (reference §4.1, §4.5).

Project id = the address, topic id = ``spec.channel``, message data = the event JSON (Flux's bytes),
message attributes = the Secret's ``headers`` (none when empty). Flux uses the gRPC SDK; we call the REST
API, which the same topic serves identically:
``POST https://pubsub.googleapis.com/v1/projects/{p}/topics/{t}:publish`` with
``{"messages":[{"data":"<base64>","attributes":{...}}]}`` and an OAuth2 bearer token.

Credentials: the Secret's ``token`` holds a service-account JSON key. The access token comes from the
key's ``token_uri`` through the JWT-bearer grant (RFC 7523: an RS256 assertion signed with the key,
scopes ``pubsub`` and ``cloud-platform``) and is reused from the dispatcher's ``TokenCache`` until shortly
before it expires. Without a ``token``, workload identity (``outbound/identity.py``, Flux's fallback): the token of
``spec.serviceAccountName`` (or ``--default-service-account``) exchanged at Google's STS under the
``ObjectLevelWorkloadIdentity`` gate, else the metadata server's (GKE workload identity, GCE), reused from
the same cache. With ``PUBSUB_EMULATOR_HOST`` set and no ``token``, messages go unauthenticated to
``http://$PUBSUB_EMULATOR_HOST`` as with Google's own client libraries.

Testing: ``NC_GOOGLE_PUBSUB_API_URL`` replaces the API base URL (read when the notifier is built); tests
point it, and the key's ``token_uri``, at local servers.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlencode

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from ..api.event import Event
from ..api.provider import ProviderType
from ..errors import DeliveryError, FailureReason, PermanentDeliveryError, ProviderConfigError, rewrap
from ..outbound import OutboundRequest
from ..outbound.identity import gcp_access_token
from ..outbound.tokens import CachedToken, TokenCache, cache_key, mint_or_cached
from .base import DeliveryContext, ProviderOptions
from .common import Caller, go_json, path_segment, str_field
from .message import with_text
from .validation import require_url

API_URL_ENV = "NC_GOOGLE_PUBSUB_API_URL"
EMULATOR_ENV = "PUBSUB_EMULATOR_HOST"
DEFAULT_API = "https://pubsub.googleapis.com"
DEFAULT_TOKEN_URI = "https://oauth2.googleapis.com/token"
SCOPES = "https://www.googleapis.com/auth/pubsub https://www.googleapis.com/auth/cloud-platform"
ASSERTION_LIFETIME = 3600
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@dataclass(frozen=True)
class ServiceAccountKey:
    """The fields of a service-account JSON key that the JWT-bearer grant needs."""

    client_email: str
    private_key_id: str
    private_key_pem: str
    token_uri: str

    def __repr__(self) -> str:
        return f"ServiceAccountKey(client_email={self.client_email!r}, token_uri={self.token_uri!r})"

    @classmethod
    def parse(cls, raw: str) -> ServiceAccountKey:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ProviderConfigError(
                "invalid GCP credentials in the Secret's 'token' key: not valid JSON"
            ) from exc
        if not isinstance(data, dict):
            raise ProviderConfigError(
                "invalid GCP credentials in the Secret's 'token' key: not a JSON object"
            )
        kind = data.get("type")
        if kind != "service_account":
            raise ProviderConfigError(
                "unsupported GCP credentials in the Secret's 'token' key: "
                f"type {kind!r} (only 'service_account' keys are supported)"
            )
        email, key_pem = str_field(data, "client_email"), str_field(data, "private_key")
        if not email or not key_pem:
            raise ProviderConfigError(
                "invalid GCP credentials in the Secret's 'token' key: 'client_email' and 'private_key' are required"
            )
        token_uri = str_field(data, "token_uri") or DEFAULT_TOKEN_URI
        require_url(token_uri, what="'token_uri' of the GCP credentials")
        if "-----BEGIN" not in key_pem:
            raise ProviderConfigError(
                "invalid GCP credentials in the Secret's 'token' key: 'private_key' is not a PEM private key"
            )
        return cls(email, str_field(data, "private_key_id") or "", key_pem, token_uri)

    def signing_key(self) -> RSAPrivateKey:
        """The RSA key, loaded when first needed (as Google's libraries do, at the first token request)."""
        try:
            key = load_pem_private_key(self.private_key_pem.encode(), password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            key = None
        if not isinstance(key, RSAPrivateKey):
            raise PermanentDeliveryError(
                "invalid GCP credentials in the Secret's 'token' key: 'private_key' is not an RSA private key",
                reason="invalid_config",
                failure=FailureReason.INVALID_CONFIG,
            )
        return key

    def assertion(self, now: float) -> str:
        """The signed JWT of the JWT-bearer grant."""
        issued = int(now)
        claims = {
            "iss": self.client_email,
            "scope": SCOPES,
            "aud": self.token_uri,
            "iat": issued,
            "exp": issued + ASSERTION_LIFETIME,
        }
        headers = {"kid": self.private_key_id} if self.private_key_id else None
        return jwt.encode(claims, self.signing_key(), algorithm="RS256", headers=headers)

    def token_request(self, now: float) -> OutboundRequest:
        body = urlencode({"grant_type": JWT_BEARER, "assertion": self.assertion(now)}).encode()
        return OutboundRequest(
            "POST",
            self.token_uri,
            {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
            body,
        )

    def cache_key(self) -> str:
        return cache_key(
            "gcp-sa", self.client_email, self.private_key_id, self.private_key_pem, self.token_uri, SCOPES
        )


def publish_body(event: Event, attributes: dict[str, str]) -> bytes:
    message: dict[str, Any] = {"data": base64.b64encode(event.to_go_json()).decode("ascii")}
    if attributes:
        message["attributes"] = dict(sorted(attributes.items()))
    return go_json({"messages": [message]})


class GooglePubSubNotifier:
    type: ClassVar[ProviderType] = ProviderType.GOOGLE_PUBSUB
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = False  # the proxy is used for workload identity tokens only (as in Flux)

    def __init__(self, opts: ProviderOptions) -> None:
        if not opts.address:
            raise ProviderConfigError("GCP project ID cannot be empty")
        if not opts.channel:
            raise ProviderConfigError("GCP Pub/Sub topic ID cannot be empty")
        self.opts = opts
        self.project, self.topic = opts.address, opts.channel
        emulator = os.environ.get(EMULATOR_ENV, "").strip()
        override = os.environ.get(API_URL_ENV, "").strip()
        self.key: ServiceAccountKey | None = None
        if opts.token_text:
            self.key = ServiceAccountKey.parse(opts.token_text)
        self.workload_identity = self.key is None and not emulator
        if override:
            self.api_base = require_url(override, what=API_URL_ENV).rstrip("/")
        elif emulator and self.key is None:
            self.api_base = require_url(f"http://{emulator}", what=EMULATOR_ENV)
        else:
            self.api_base = DEFAULT_API

    @property
    def topic_path(self) -> str:
        return f"projects/{self.project}/topics/{self.topic}"

    def publish_request(self, event: Event, access_token: str | None) -> OutboundRequest:
        url = f"{self.api_base}/v1/projects/{path_segment(self.project)}/topics/{path_segment(self.topic)}:publish"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if access_token:
            headers["Authorization"] = f"Bearer {access_token}"
        return OutboundRequest("POST", url, headers, publish_body(event, dict(self.opts.headers)))

    async def access_token(self, call: Caller) -> str | None:
        key = self.key
        if key is None:
            return await gcp_access_token(call) if self.workload_identity else None
        cache = call.ctx.tokens if isinstance(call.ctx.tokens, TokenCache) else None

        async def mint() -> CachedToken:
            now = time.time()
            answer = await call.send_json(
                key.token_request(now), what="failed to get a GCP access token", tls=False
            )
            value = str_field(answer, "access_token") if isinstance(answer, dict) else None
            if not value:
                raise PermanentDeliveryError(
                    "failed to get a GCP access token: the answer has no access_token",
                    reason="invalid_response",
                    failure=FailureReason.AUTH,
                )
            expires_in = answer.get("expires_in") if isinstance(answer, dict) else None
            lifetime = float(expires_in) if isinstance(expires_in, int | float) and expires_in > 0 else 3600.0
            return CachedToken(value, now + lifetime)

        token = await mint_or_cached(cache, key.cache_key(), mint)
        call.add_mask(token.value)
        return token.value

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        call = Caller(ctx, self.opts)
        try:
            token = await self.access_token(call)
        except DeliveryError as exc:
            raise rewrap(exc, f"error publishing to GCP Pub/Sub topic {self.topic_path}") from None
        await call.send(
            self.publish_request(with_text(event, ctx.template), token),
            what=f"error publishing to GCP Pub/Sub topic {self.topic_path}",
            tls=False,
        )

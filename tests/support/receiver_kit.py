"""Test kit for the receiver server: objects, a running app, senders' signatures and a local OIDC issuer.

* ``make_receiver`` builds a Receiver (Ready, with ``status.webhookPath`` computed as the reconciler does)
  and its Secret;
* ``Harness`` runs the receiver listener as the app does (``create_receiver_endpoint(...).server()``, the
  HTTP/1.1 layer of ``server/http1.py``) on a real socket over an ``ObjectStore`` and a recording
  ``MemoryCluster``, with a ``ManualClock``; ``post`` sends with a real aiohttp client;
* ``LocalIssuer`` is an OIDC provider on 127.0.0.1 (discovery + JWKS served by aiohttp) with its own RSA and
  EC keys, minting ID tokens for ``generic-oidc`` and ``gcr`` (Google's issuer names, local keys);
* ``CASES`` describes, per receiver type, a valid request as its real sender makes it and how to break it;
  the conformance kit and the fuzz tests share it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self

import aiohttp
import jwt
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from prometheus_client import CollectorRegistry

from notification_controller.api.common import Secret
from notification_controller.api.receiver import Receiver
from notification_controller.core.webhook import webhook_path
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import ObjectStore
from notification_controller.server.http1 import HTTPServer
from notification_controller.server.receivers import (
    ReceiverEndpoint,
    ReceiverServerSettings,
    create_receiver_endpoint,
)
from tests.support.memory_cluster import MemoryCluster

TOKEN = "s3cr3t-receiver-token"
GIT = "source.toolkit.fluxcd.io/v1"
IMAGE = "image.toolkit.fluxcd.io/v1"
GOOGLE_ISSUER = "https://accounts.google.com"
GCR_EMAIL = "pusher@my-project.iam.gserviceaccount.com"
GCR_AUDIENCE = "https://flux.example.com/hook/gcr"


def ready_status(path: str) -> dict[str, Any]:
    return {
        "webhookPath": path,
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Succeeded",
                "message": "Receiver initialized",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }


def make_receiver(
    type_: str,
    *,
    name: str = "receiver",
    namespace: str = "default",
    token: str | bytes = TOKEN,
    secret_data: Mapping[str, str | bytes] | None = None,
    events: list[str] | None = None,
    resources: list[dict[str, Any]] | None = None,
    resource_filter: str | None = None,
    oidc_providers: list[dict[str, Any]] | None = None,
    suspend: bool = False,
    status: dict[str, Any] | None = None,
    secret_name: str | None = None,
) -> tuple[Receiver, Secret | None]:
    """A Ready Receiver and its Secret (None for generic-oidc)."""
    oidc = type_ == "generic-oidc"
    raw_token = token.encode() if isinstance(token, str) else token
    path = webhook_path(b"" if oidc else raw_token, name, namespace)
    spec: dict[str, Any] = {
        "type": type_,
        "resources": resources or [{"apiVersion": GIT, "kind": "GitRepository", "name": "webapp"}],
        "suspend": suspend,
    }
    if events is not None:
        spec["events"] = events
    if resource_filter is not None:
        spec["resourceFilter"] = resource_filter
    secret: Secret | None = None
    if oidc:
        spec["oidcProviders"] = oidc_providers or []
    else:
        sname = secret_name or f"{name}-token"
        spec["secretRef"] = {"name": sname}
        data = {"token": raw_token}
        for key, value in (secret_data or {}).items():
            data[key] = value.encode() if isinstance(value, str) else value
        secret = Secret.model_validate({"metadata": {"name": sname, "namespace": namespace}, "data": data})
    receiver = Receiver.model_validate(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1",
            "kind": "Receiver",
            "metadata": {"name": name, "namespace": namespace, "generation": 1, "uid": f"uid-{name}"},
            "spec": spec,
            "status": status if status is not None else ready_status(path),
        }
    )
    return receiver, secret


def github_signature(key: bytes, body: bytes, algo: str = "sha256") -> str:
    return f"{algo}=" + hmac.new(key, body, getattr(hashlib, algo)).hexdigest()


class Harness:
    """A running receiver listener over an in-memory store and cluster."""

    def __init__(self, settings: ReceiverServerSettings | None = None, *, cluster_waits: bool = True) -> None:
        self.settings = settings or ReceiverServerSettings()
        self.cluster_waits = cluster_waits  # False: as local mode (a webhook answered without a task)
        self.store = ObjectStore()
        self.store.mark_synced()
        self.cluster = MemoryCluster()
        self.clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
        self.registry = CollectorRegistry()
        self.endpoint: ReceiverEndpoint | None = None
        self.server: HTTPServer | None = None
        self.client: aiohttp.ClientSession | None = None
        self._port = 0

    def add(self, receiver: Receiver, secret: Secret | None) -> str:
        self.store.upsert(receiver)
        if secret is not None:
            self.store.upsert(secret)
        return str(receiver.status.webhook_path)

    def add_targets(self, namespace: str = "default") -> None:
        self.cluster.add(GIT, "GitRepository", namespace, "webapp")
        self.cluster.add(IMAGE, "ImageRepository", namespace, "webapp")

    async def __aenter__(self) -> Self:
        self.endpoint = create_receiver_endpoint(
            self.store,
            self.cluster,
            settings=self.settings,
            metrics=self.registry,
            clock=self.clock,
            cluster_waits=self.cluster_waits,
        )
        self.server = self.endpoint.server()
        self._port = await self.server.start("127.0.0.1", 0)
        self.client = aiohttp.ClientSession(f"http://127.0.0.1:{self._port}")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.client is not None and self.server is not None and self.endpoint is not None
        await self.client.close()
        await self.server.stop(grace=1.0)
        await self.endpoint.close()

    @property
    def port(self) -> int:
        assert self._port
        return self._port

    async def post(
        self, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None, method: str = "POST"
    ) -> tuple[int, bytes, Mapping[str, str]]:
        assert self.client is not None
        data: Any = io.BytesIO(body) if len(body) > 1 << 20 else body
        async with self.client.request(
            method, path, data=data, headers=dict(headers or {}), allow_redirects=False
        ) as resp:
            answer = await resp.read()
            return resp.status, answer, resp.headers

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else value


# --------------------------------------------------------------------------------------------------
# A local OIDC issuer
# --------------------------------------------------------------------------------------------------


def _jwk(public: Any, kid: str, alg: str) -> dict[str, Any]:
    data = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(public))
    data.update({"kid": kid, "alg": alg, "use": "sig"})
    return dict(data)


class LocalIssuer:
    """An OIDC provider on 127.0.0.1: ``/.well-known/openid-configuration`` and ``/jwks``."""

    # generated once per test process (RSA is slow)
    _keys: tuple[rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey] | None = None

    def __init__(self, *, issuer_override: str | None = None) -> None:
        if LocalIssuer._keys is None:
            LocalIssuer._keys = (
                rsa.generate_private_key(public_exponent=65537, key_size=2048),
                ec.generate_private_key(ec.SECP256R1()),
                rsa.generate_private_key(public_exponent=65537, key_size=2048),
            )
        self.rsa: rsa.RSAPrivateKey = LocalIssuer._keys[0]
        self.ec: ec.EllipticCurvePrivateKey = LocalIssuer._keys[1]
        self.other: rsa.RSAPrivateKey = LocalIssuer._keys[2]  # never published
        self.issuer_override = issuer_override
        self.requests: list[str] = []
        self._server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.port}"

    @property
    def jwks_url(self) -> str:
        return self.url + "/jwks"

    async def __aenter__(self) -> Self:
        async def discovery(request: web.Request) -> web.Response:
            self.requests.append(request.path)
            return web.json_response(
                {
                    "issuer": self.issuer_override or self.url,
                    "jwks_uri": self.jwks_url,
                    "id_token_signing_alg_values_supported": ["RS256", "ES256"],
                }
            )

        async def jwks(request: web.Request) -> web.Response:
            self.requests.append(request.path)
            keys = [
                _jwk(self.rsa.public_key(), "rsa-1", "RS256"),
                _jwk(self.ec.public_key(), "ec-1", "ES256"),
            ]
            return web.json_response({"keys": keys})

        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", discovery)
        app.router.add_get("/jwks", jwks)
        self._server = TestServer(app)
        await self._server.start_server()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        await self._server.close()

    def mint(
        self,
        claims: Mapping[str, Any],
        *,
        alg: str = "RS256",
        kid: str | None = None,
        key: Any = None,
    ) -> str:
        if key is None:
            key = self.ec if alg == "ES256" else self.rsa
        if kid is None:
            kid = "ec-1" if alg == "ES256" else "rsa-1"
        return jwt.encode(dict(claims), key, algorithm=alg, headers={"kid": kid})


def unsigned_token(claims: Mapping[str, Any]) -> str:
    """An ``alg: none`` JWT (must always be refused)."""

    def part(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(dict(claims))}."


def token_claims(now: datetime, **overrides: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "sub": "subject",
        "iat": int(now.timestamp()),
        "exp": int((now + timedelta(minutes=10)).timestamp()),
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def pubsub_body(data: Mapping[str, Any]) -> bytes:
    encoded = base64.b64encode(json.dumps(data).encode()).decode()
    return json.dumps(
        {
            "message": {
                "data": encoded,
                "messageId": "136969346945",
                "publishTime": "2026-01-01T00:00:00.000Z",
                "subscription": "projects/my-project/subscriptions/flux",
            },
            "subscription": "projects/my-project/subscriptions/flux",
        }
    ).encode()

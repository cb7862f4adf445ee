"""Test kit for the receiver server: objects, a running app, senders' signatures and a local OIDC issuer.

* ``make_receiver`` builds a Receiver (Ready, with ``status.webhookPath`` computed as the reconciler does)
  and its Secret;
* ``Harness`` runs ``create_receiver_app`` on a real socket (``aiohttp.test_utils.TestServer``) over an
  ``ObjectStore`` and a recording ``MemoryCluster``, with a ``ManualClock``;
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self

import jwt
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from prometheus_client import CollectorRegistry

from notification_controller.api.common import Secret
from notification_controller.api.receiver import Receiver
from notification_controller.core.clock import ManualClock
from notification_controller.core.webhook import webhook_path
from notification_controller.receivers.base import GCRSettings
from notification_controller.server.receivers import (
    ReceiverServerSettings,
    create_receiver_app,
    runner_kwargs,
)
from notification_controller.store.base import ObjectStore
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
    """A running receiver app over an in-memory store and cluster."""

    def __init__(self, settings: ReceiverServerSettings | None = None, *, access_log: bool = False) -> None:
        self.settings = settings or ReceiverServerSettings()
        self.access_log = access_log  # True: aiohttp's default access log (to prove it is redacted)
        self.store = ObjectStore()
        self.store.mark_synced()
        self.cluster = MemoryCluster()
        self.clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
        self.registry = CollectorRegistry()
        self.app: web.Application | None = None
        self.client: TestClient[web.Request, web.Application] | None = None

    def add(self, receiver: Receiver, secret: Secret | None) -> str:
        self.store.upsert(receiver)
        if secret is not None:
            self.store.upsert(secret)
        return str(receiver.status.webhook_path)

    def add_targets(self, namespace: str = "default") -> None:
        self.cluster.add(GIT, "GitRepository", namespace, "webapp")
        self.cluster.add(IMAGE, "ImageRepository", namespace, "webapp")

    async def __aenter__(self) -> Self:
        self.app = create_receiver_app(
            self.store, self.cluster, settings=self.settings, metrics=self.registry, clock=self.clock
        )
        server = TestServer(self.app)
        kwargs = runner_kwargs(self.settings, self.app)  # with ProtocolErrorLog, as the App serves it
        kwargs.pop("handler_cancellation")  # TestServer always sets it
        if self.access_log:
            kwargs.pop("access_log")
        await server.start_server(**kwargs)
        self.client = TestClient(server)
        await self.client.start_server()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.client is not None
        await self.client.close()

    @property
    def port(self) -> int:
        assert self.client is not None and self.client.port is not None
        return self.client.port

    async def post(
        self, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None, method: str = "POST"
    ) -> tuple[int, bytes, Mapping[str, str]]:
        assert self.client is not None
        data: Any = io.BytesIO(body) if len(body) > 1 << 20 else body
        resp = await self.client.request(method, path, data=data, headers=dict(headers or {}))
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


# --------------------------------------------------------------------------------------------------
# One valid request per type, and how to break it
# --------------------------------------------------------------------------------------------------

Request = tuple[dict[str, str], bytes]


@dataclass
class Env:
    """What a case needs to build requests: the token, the issuer (oidc types) and the clock."""

    token: str
    issuer: LocalIssuer
    now: datetime


@dataclass
class ReceiverCase:
    type: str
    valid: Callable[[Env], Request]
    # name → a request that must be refused by authentication (empty for types without authentication)
    forged: dict[str, Callable[[Env], Request]] = field(default_factory=dict)
    # (header, accepted event, refused event) for types with ``spec.events``
    events: tuple[str, str, str] | None = None
    # a request with a malformed payload (types that validate the body)
    bad_payload: Callable[[Env], Request] | None = None
    secret_data: dict[str, str] = field(default_factory=dict)
    oidc_providers: Callable[[Env], list[dict[str, Any]]] | None = None
    settings: Callable[[Env], dict[str, Any]] | None = None


GITHUB_PUSH = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "org/webapp"}}).encode()


def _github(env: Env) -> Request:
    sig = github_signature(env.token.encode(), GITHUB_PUSH)
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-Hub-Signature-256": sig,
    }, GITHUB_PUSH


def _with(fn: Callable[[Env], Request], **changes: str | None) -> Callable[[Env], Request]:
    def build(env: Env) -> Request:
        headers, body = fn(env)
        headers = dict(headers)
        for key, value in changes.items():
            key = key.replace("_", "-")
            if value is None:
                headers.pop(key, None)
            else:
                headers[key] = value
        return headers, body

    return build


def _mutate_header(
    fn: Callable[[Env], Request], header: str, how: Callable[[str], str]
) -> Callable[[Env], Request]:
    def build(env: Env) -> Request:
        headers, body = fn(env)
        headers = dict(headers)
        headers[header] = how(headers[header])
        return headers, body

    return build


def _flip_last(value: str) -> str:
    return value[:-1] + ("0" if value[-1] != "0" else "1")


def _signature_forgeries(fn: Callable[[Env], Request], header: str) -> dict[str, Callable[[Env], Request]]:
    return {
        "wrong": _mutate_header(fn, header, _flip_last),
        "missing": _with(fn, **{header.replace("-", "_"): None}),
        "truncated": _mutate_header(fn, header, lambda v: v[: len(v) // 2]),
        "other-key": _resign(fn, header),
    }


def _resign(fn: Callable[[Env], Request], header: str) -> Callable[[Env], Request]:
    def build(env: Env) -> Request:
        headers, body = fn(Env("another-receivers-token", env.issuer, env.now))
        return headers, body

    return build


BITBUCKET_PUSH = json.dumps(
    {"eventKey": "repo:refs_changed", "changes": [{"refId": "refs/heads/main"}]}
).encode()


def _bitbucket(env: Env) -> Request:
    return {
        "Content-Type": "application/json; charset=utf-8",
        "X-Event-Key": "repo:refs_changed",
        "X-Request-Id": "d5b1a5a8-6a3c-4ac0-a4a6-5c3fd5bb52f1",
        "X-Hub-Signature": github_signature(env.token.encode(), BITBUCKET_PUSH),
    }, BITBUCKET_PUSH


GENERIC_BODY = b'{"hello":"world"}'


def _generic_hmac(env: Env) -> Request:
    return {
        "Content-Type": "application/json",
        "X-Signature": github_signature(env.token.encode(), GENERIC_BODY),
    }, GENERIC_BODY


GITLAB_PUSH = json.dumps({"object_kind": "push", "ref": "refs/heads/main"}).encode()


def _gitlab(env: Env) -> Request:
    return {
        "Content-Type": "application/json",
        "X-Gitlab-Event": "Push Hook",
        "X-Gitlab-Token": env.token,
        "X-Gitlab-Event-UUID": "13792a34-cac6-4fda-95a8-c58e00a3954e",
    }, GITLAB_PUSH


HARBOR_PUSH = json.dumps(
    {
        "type": "PUSH_ARTIFACT",
        "event_data": {"resources": [{"tag": "v1.0.0"}], "repository": {"name": "webapp"}},
    }
).encode()


def _harbor(env: Env) -> Request:
    return {"Content-Type": "application/json", "Authorization": env.token}, HARBOR_PUSH


NEXUS_BODY = json.dumps(
    {
        "timestamp": "2026-01-01T00:00:00.000+0000",
        "nodeId": "node",
        "initiator": "admin/127.0.0.1",
        "repositoryName": "docker-hosted",
        "action": "CREATED",
    }
).encode()


def _nexus(env: Env) -> Request:
    sig = hmac.new(env.token.encode(), NEXUS_BODY, hashlib.sha1).hexdigest()
    return {"Content-Type": "application/json", "X-Nexus-Webhook-Signature": sig}, NEXUS_BODY


DOCKERHUB_BODY = json.dumps(
    {
        "push_data": {"pushed_at": 1417566161, "pusher": "trustedbuilder", "tag": "latest"},
        "repository": {"repo_url": "https://registry.hub.docker.com/u/org/webapp/", "name": "webapp"},
    }
).encode()
QUAY_BODY = json.dumps(
    {
        "name": "webapp",
        "repository": "org/webapp",
        "namespace": "org",
        "docker_url": "quay.io/org/webapp",
        "homepage": "https://quay.io/repository/org/webapp",
        "updated_tags": ["latest", "v1.0.0"],
    }
).encode()
ACR_BODY = json.dumps(
    {
        "id": "cb8c3971-9adc-488b-bdd8-43cbb4974ff5",
        "timestamp": "2026-01-01T00:00:00Z",
        "action": "push",
        "target": {
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "size": 524,
            "digest": "sha256:80f0d5c8",
            "repository": "webapp",
            "tag": "v1",
        },
        "request": {"id": "3cbb6949", "host": "myregistry.azurecr.io", "method": "PUT"},
    }
).encode()
CDEVENT_BODY = json.dumps(
    {
        "context": {
            "version": "0.4.1",
            "id": "271069a8-fc18-44f1-b38f-9d70a1695819",
            "source": "/event/source/123",
            "type": "dev.cdevents.change.merged.0.2.0",
            "timestamp": "2026-01-01T14:27:05.315384Z",
        },
        "subject": {
            "id": "mySubject123",
            "source": "/event/source/123",
            "type": "change",
            "content": {"repository": {"id": "org/webapp", "source": "https://example.org"}},
        },
    }
).encode()


def _plain(body: bytes) -> Callable[[Env], Request]:
    return lambda env: ({"Content-Type": "application/json"}, body)


def _cdevents(env: Env) -> Request:
    return {
        "Content-Type": "application/json",
        "Ce-Type": "dev.cdevents.change.merged.0.2.0",
        "Ce-Id": "271069a8-fc18-44f1-b38f-9d70a1695819",
        "Ce-Source": "/event/source/123",
        "Ce-Specversion": "1.0",
    }, CDEVENT_BODY


def _gcr(env: Env) -> Request:
    token = env.issuer.mint(
        token_claims(env.now, iss=GOOGLE_ISSUER, aud=GCR_AUDIENCE, email=GCR_EMAIL, email_verified=True)
    )
    body = pubsub_body(
        {
            "action": "INSERT",
            "digest": "gcr.io/my-project/webapp@sha256:6ec1",
            "tag": "gcr.io/my-project/webapp:v1",
        }
    )
    return {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}, body


def _oidc(env: Env) -> Request:
    token = env.issuer.mint(
        token_claims(env.now, iss=env.issuer.url, aud="notification-controller", repository_owner="my-org")
    )
    return {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}, GENERIC_BODY


def _oidc_providers(env: Env) -> list[dict[str, Any]]:
    return [
        {
            "issuerURL": env.issuer.url,
            "validations": [{"expression": "claims.repository_owner == 'my-org'", "message": "wrong org"}],
        }
    ]


def _token_forgeries(fn: Callable[[Env], Request]) -> dict[str, Callable[[Env], Request]]:
    def foreign_key(env: Env) -> Request:
        headers, body = fn(env)
        token = headers["Authorization"].removeprefix("Bearer ")
        claims = jwt.decode(token, options={"verify_signature": False})
        forged = env.issuer.mint(claims, key=env.issuer.other)
        return {**headers, "Authorization": f"Bearer {forged}"}, body

    return {
        "wrong": _mutate_header(
            fn, "Authorization", lambda v: v[:-3] + ("AAA" if not v.endswith("AAA") else "BBB")
        ),
        "missing": _with(fn, Authorization=None),
        "truncated": _mutate_header(fn, "Authorization", lambda v: v[: len(v) // 2]),
        "other-key": foreign_key,
    }


CASES: dict[str, ReceiverCase] = {
    "generic": ReceiverCase("generic", _plain(GENERIC_BODY)),
    "generic-hmac": ReceiverCase(
        "generic-hmac", _generic_hmac, _signature_forgeries(_generic_hmac, "X-Signature")
    ),
    "generic-oidc": ReceiverCase(
        "generic-oidc", _oidc, _token_forgeries(_oidc), oidc_providers=_oidc_providers
    ),
    "github": ReceiverCase(
        "github",
        _github,
        _signature_forgeries(_github, "X-Hub-Signature-256"),
        events=("X-GitHub-Event", "push", "issues"),
    ),
    "gitlab": ReceiverCase(
        "gitlab",
        _gitlab,
        {
            "wrong": _mutate_header(_gitlab, "X-Gitlab-Token", _flip_last),
            "missing": _with(_gitlab, X_Gitlab_Token=None),
            "truncated": _mutate_header(_gitlab, "X-Gitlab-Token", lambda v: v[:-1]),
            "other-key": _resign(_gitlab, "X-Gitlab-Token"),
        },
        events=("X-Gitlab-Event", "Push Hook", "Merge Request Hook"),
    ),
    "bitbucket": ReceiverCase(
        "bitbucket",
        _bitbucket,
        _signature_forgeries(_bitbucket, "X-Hub-Signature"),
        events=("X-Event-Key", "repo:refs_changed", "pr:opened"),
    ),
    "harbor": ReceiverCase(
        "harbor",
        _harbor,
        {
            "wrong": _mutate_header(_harbor, "Authorization", _flip_last),
            "missing": _with(_harbor, Authorization=None),
            "truncated": _mutate_header(_harbor, "Authorization", lambda v: v[:-1]),
            "other-key": _resign(_harbor, "Authorization"),
        },
    ),
    "dockerhub": ReceiverCase(
        "dockerhub", _plain(DOCKERHUB_BODY), bad_payload=_plain(b'{"push_data":{"tag":42}}')
    ),
    "quay": ReceiverCase("quay", _plain(QUAY_BODY), bad_payload=_plain(b'{"updated_tags":"latest"}')),
    "gcr": ReceiverCase(
        "gcr",
        _gcr,
        _token_forgeries(_gcr),
        bad_payload=lambda env: (_gcr(env)[0], b'{"message":{"data":42}}'),
        secret_data={"email": GCR_EMAIL, "audience": GCR_AUDIENCE},
        settings=lambda env: {"gcr": GCRSettings(jwks_url=env.issuer.jwks_url)},
    ),
    "nexus": ReceiverCase(
        "nexus",
        _nexus,
        _signature_forgeries(_nexus, "X-Nexus-Webhook-Signature"),
        bad_payload=None,
    ),
    "acr": ReceiverCase("acr", _plain(ACR_BODY), bad_payload=_plain(b'{"target":[]}')),
    "cdevents": ReceiverCase(
        "cdevents",
        _cdevents,
        events=("Ce-Type", "dev.cdevents.change.merged.0.2.0", "dev.cdevents.build.started.0.2.0"),
        bad_payload=_plain(b'{"context":{"type":"dev.cdevents.change.merged.0.2.0"},"subject":{}}'),
    ),
}

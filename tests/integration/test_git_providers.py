"""Git-forge and SDK-style providers against real local servers (reference §4.1-§4.5).

Each test runs the notifier through the production ``OutboundHTTP`` against ``CaptureServer`` (or a real
``nats-server``) and asserts what went over the wire: list-then-create for commit statuses, duplicate
suppression, the ``Progressing`` rule, comment upserts, GitHub App token exchange and caching, NATS
payloads, Pub/Sub OAuth2 and Event Hubs SAS.

Every test here is async (pytest-asyncio 1.5 leaks a loop when a sync test precedes an async one).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from notification_controller.api.alert import Alert
from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.core.redact import SecretValue
from notification_controller.errors import (
    DeliveryError,
    FailureReason,
    PermanentDeliveryError,
    RetryableDeliveryError,
)
from notification_controller.outbound import OutboundHTTP, RetryPolicy
from notification_controller.outbound.tokens import TokenCache
from notification_controller.providers.base import DeliveryContext, Notifier, ProviderOptions
from notification_controller.providers.message import Message
from notification_controller.providers.registry import create_notifier
from tests.support.capture import CapturedRequest, CaptureServer, Reply
from tests.support.nats_server import jwt_auth, nkey_user, run_nats_server

SHA = "5394cb7f48332b2de7c17dd8b8384bbc84b7e738"
UID = "0c9c2e41-d2f9-4f9b-9c41-bebc1984d67a"
STATUS_ID = "kustomization/podinfo/0c9c2e41"
DESC = "reconciliation succeeded"
FAST = RetryPolicy(max_attempts=3, wait_min=0.01, wait_max=0.02)

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KEY_PEM = KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
)


def make_event(**kw: Any) -> Event:
    raw: dict[str, Any] = {
        "involvedObject": {
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": "podinfo",
            "uid": "u-1",
        },
        "severity": "info",
        "timestamp": "2026-01-02T03:04:05Z",
        "message": "Applied revision <main>",
        "reason": "ReconciliationSucceeded",
        "metadata": {"revision": f"main@sha1:{SHA}", "change_request": "42"},
        "reportingController": "kustomize-controller",
    }
    raw.update(kw)
    return Event.from_raw(raw)


def opts(ptype: ProviderType, **kw: Any) -> ProviderOptions:
    kw.setdefault("uid", UID)
    kw.setdefault("timeout", 10.0)
    for key in ("token", "password"):
        if isinstance(kw.get(key), str):
            kw[key] = SecretValue(kw[key])
    return ProviderOptions(type=ptype, name="p", namespace="flux-system", **kw)


@pytest.fixture
async def http() -> AsyncIterator[OutboundHTTP]:
    client = OutboundHTTP(FAST)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def deliver(
    notifier: Notifier,
    event: Event,
    http: OutboundHTTP,
    *,
    tokens: TokenCache | None = None,
    alert: Alert | None = None,
    template: Message | None = None,
) -> None:
    ctx = DeliveryContext(
        http=http, alert=alert, tokens=tokens, message=template, templated=template is not None
    )
    await notifier.post(event, ctx)


def calls(srv: CaptureServer) -> list[str]:
    return [f"{r.method} {r.path}" for r in srv.requests]


# ----------------------------------------------------------------------------------------------------
# commit statuses (§4.2): list, then create unless an equal status exists
# ----------------------------------------------------------------------------------------------------

BB_KEY = hashlib.sha1(STATUS_ID.encode(), usedforsecurity=False).hexdigest()


def forge(ptype: ProviderType, url: str) -> tuple[ProviderOptions, str, str, Any]:
    """(options, listing path regex, create path, an equal existing status as the forge returns it)."""
    if ptype is ProviderType.GITHUB:
        equal: Any = [{"context": STATUS_ID, "state": "success", "description": DESC}]
        return (
            opts(ptype, address=f"{url}/o/r", token="gh-token"),
            f"/api/v3/repos/o/r/commits/{SHA}/statuses",
            f"/api/v3/repos/o/r/statuses/{SHA}",
            equal,
        )
    if ptype is ProviderType.GITLAB:
        equal = [{"sha": SHA, "status": "success", "description": DESC, "name": STATUS_ID}]
        return (
            opts(ptype, address=f"{url}/g/p", token="gl-token"),
            "/repository/commits/.*/statuses",
            f"/api/v4/projects/g/p/statuses/{SHA}",
            equal,
        )
    if ptype is ProviderType.GITEA:
        equal = [{"context": STATUS_ID, "status": "success", "description": DESC}]
        return (
            opts(ptype, address=f"{url}/o/r", token="gt-token"),
            f"/api/v1/repos/o/r/commits/{SHA}/statuses",
            f"/api/v1/repos/o/r/statuses/{SHA}",
            equal,
        )
    if ptype is ProviderType.BITBUCKET:
        equal = {"key": BB_KEY, "state": "SUCCESSFUL", "description": DESC}
        return (
            opts(ptype, address="https://bitbucket.org/o/r", token="user:app-password"),
            f"/2.0/repositories/o/r/commit/{SHA}/statuses/build/{BB_KEY}",
            f"/2.0/repositories/o/r/commit/{SHA}/statuses/build",
            equal,
        )
    if ptype is ProviderType.BITBUCKET_SERVER:
        equal = {
            "key": BB_KEY,
            "state": "SUCCESSFUL",
            "description": DESC,
            "name": f"kustomization/podinfo [{DESC}]",
        }
        path = f"/rest/api/latest/projects/P/repos/r/commits/{SHA}/builds"
        return (opts(ptype, address=f"{url}/scm/P/r.git", token="bbs-token"), path, path, equal)
    assert ptype is ProviderType.AZURE_DEVOPS
    equal = {
        "count": 1,
        "value": [
            {"context": {"name": STATUS_ID, "genre": "fluxcd"}, "state": "succeeded", "description": DESC}
        ],
    }
    path = f"/org/proj/_apis/git/repositories/r/commits/{SHA}/statuses"
    return (opts(ptype, address=f"{url}/org/proj/_git/r", token="ado-pat"), path, path, equal)


COMMIT_TYPES = [
    ProviderType.GITHUB,
    ProviderType.GITLAB,
    ProviderType.GITEA,
    ProviderType.BITBUCKET,
    ProviderType.BITBUCKET_SERVER,
    ProviderType.AZURE_DEVOPS,
]
EMPTY_LISTING: dict[ProviderType, tuple[int, Any]] = {
    ProviderType.GITHUB: (200, []),
    ProviderType.GITLAB: (200, []),
    ProviderType.GITEA: (200, []),
    ProviderType.BITBUCKET: (404, {"type": "error"}),
    ProviderType.BITBUCKET_SERVER: (404, {"errors": []}),
    ProviderType.AZURE_DEVOPS: (200, {"count": 0, "value": []}),
}


@pytest.fixture
def bitbucket_api(monkeypatch: pytest.MonkeyPatch) -> Any:
    def point(url: str) -> None:
        monkeypatch.setenv("BITBUCKET_API_BASE_URL", f"{url}/2.0")

    return point


@pytest.mark.parametrize("ptype", COMMIT_TYPES, ids=lambda t: t.value)
async def test_commit_status_is_listed_then_created(
    ptype: ProviderType, http: OutboundHTTP, bitbucket_api: Any
) -> None:
    """Reference §4.2: the listing call comes first, then exactly one create."""
    async with CaptureServer() as srv:
        bitbucket_api(srv.url)
        options, listing, create, _ = forge(ptype, srv.url)
        srv.on("GET", listing, Reply(*EMPTY_LISTING[ptype]))
        await deliver(create_notifier(options), make_event(), http)
        assert [r.method for r in srv.requests] == ["GET", "POST"]
        assert srv.requests[1].path == create
        body = srv.requests[1].json()
        assert DESC in json.dumps(body)


@pytest.mark.parametrize("ptype", COMMIT_TYPES, ids=lambda t: t.value)
async def test_equal_status_is_not_posted_again(
    ptype: ProviderType, http: OutboundHTTP, bitbucket_api: Any
) -> None:
    """Reference §4.2 duplicate suppression: an equal existing status means no create call."""
    async with CaptureServer() as srv:
        bitbucket_api(srv.url)
        options, listing, _, equal = forge(ptype, srv.url)
        srv.on("GET", listing, Reply(200, equal))
        await deliver(create_notifier(options), make_event(), http)
        assert [r.method for r in srv.requests] == ["GET"]
        # The same status for a failure is not a duplicate: it is posted.
        await deliver(create_notifier(options), make_event(severity="error"), http)
        assert [r.method for r in srv.requests] == ["GET", "GET", "POST"]


@pytest.mark.parametrize("ptype", COMMIT_TYPES, ids=lambda t: t.value)
async def test_progressing_is_skipped_except_gitea_pending(
    ptype: ProviderType, http: OutboundHTTP, bitbucket_api: Any
) -> None:
    """Reference §4.2: Progressing events are skipped — Gitea posts them as 'pending'."""
    async with CaptureServer() as srv:
        bitbucket_api(srv.url)
        options, listing, create, _ = forge(ptype, srv.url)
        srv.on("GET", listing, Reply(*EMPTY_LISTING[ptype]))
        await deliver(create_notifier(options), make_event(reason="Progressing"), http)
        if ptype is ProviderType.GITEA:
            assert calls(srv)[-1] == f"POST {create}"
            assert srv.requests[-1].json()["state"] == "pending"
        else:
            assert srv.requests == []


async def test_dispatcher_commit_status_id_wins(http: OutboundHTTP) -> None:
    """Reference §3.6 step 9: the id computed by the dispatcher (commitStatusExpr) is the context."""
    async with CaptureServer() as srv:
        srv.on("GET", "/statuses$", Reply(200, []))
        options = opts(ProviderType.GITHUB, address=f"{srv.url}/o/r", token="t", commit_status="flux/prod-eu")
        await deliver(create_notifier(options), make_event(), http)
        assert srv.requests[-1].json()["context"] == "flux/prod-eu"


async def test_forge_errors_are_prefixed_and_masked(http: OutboundHTTP) -> None:
    """A 401 that echoes the token: Flux's prefix, the status code, and the token masked."""
    async with CaptureServer() as srv:
        srv.on("GET", "/statuses$", Reply(401, {"message": "bad credentials glpat-secret-value"}))
        notifier = create_notifier(
            opts(ProviderType.GITLAB, address=f"{srv.url}/g/p", token="glpat-secret-value")
        )
        with pytest.raises(PermanentDeliveryError) as info:
            await deliver(notifier, make_event(), http)
    message = str(info.value)
    assert message.startswith("unable to list commit status: request failed with status code 401")
    assert "glpat-secret-value" not in message
    assert info.value.reason == "http_401"


async def test_bitbucket_server_listing_error_is_not_a_missing_status(http: OutboundHTTP) -> None:
    """Only 404 means 'no status yet'; another error stops the delivery before any create."""
    async with CaptureServer() as srv:
        srv.on("GET", "/builds$", Reply(403, {"errors": ["forbidden"]}))
        notifier = create_notifier(
            opts(ProviderType.BITBUCKET_SERVER, address=f"{srv.url}/scm/P/r.git", token="t")
        )
        with pytest.raises(PermanentDeliveryError, match=r"^could not get existing commit status"):
            await deliver(notifier, make_event(), http)
        assert [r.method for r in srv.requests] == ["GET"]


# ----------------------------------------------------------------------------------------------------
# change-request comments (§4.3)
# ----------------------------------------------------------------------------------------------------

PR_MARKER = f"<!-- flux-pr-comment-key:{UID}/Kustomization/flux-system/podinfo -->"
MR_MARKER = f"<!-- flux-mr-comment-key:{UID}/Kustomization/flux-system/podinfo -->"

COMMENT_FORGES: dict[ProviderType, dict[str, Any]] = {
    ProviderType.GITHUB_PR_COMMENT: {
        "address": "/o/r",
        "user": ("/api/v3/user$", {"login": "me"}),
        "list": "/api/v3/repos/o/r/issues/42/comments$",
        "create": ("POST", "/api/v3/repos/o/r/issues/42/comments"),
        "edit": ("PATCH", "/api/v3/repos/o/r/issues/comments/{id}"),
        "comment": lambda cid, who, body: {"id": cid, "user": {"login": who}, "body": body},
        "marker": PR_MARKER,
    },
    ProviderType.GITLAB_MR_COMMENT: {
        "address": "/g/p",
        "user": ("/api/v4/user$", {"username": "me"}),
        "list": "/merge_requests/42/notes$",
        "create": ("POST", "/api/v4/projects/g/p/merge_requests/42/notes"),
        "edit": ("PUT", "/api/v4/projects/g/p/merge_requests/42/notes/{id}"),
        "comment": lambda cid, who, body: {"id": cid, "author": {"username": who}, "body": body},
        "marker": MR_MARKER,
    },
    ProviderType.GITEA_PR_COMMENT: {
        "address": "/o/r",
        "user": ("/api/v1/user$", {"login": "me"}),
        "list": "/api/v1/repos/o/r/issues/42/comments$",
        "create": ("POST", "/api/v1/repos/o/r/issues/42/comments"),
        "edit": ("PATCH", "/api/v1/repos/o/r/issues/comments/{id}"),
        "comment": lambda cid, who, body: {"id": cid, "user": {"login": who}, "body": body},
        "marker": PR_MARKER,
    },
}


@pytest.mark.parametrize("ptype", list(COMMENT_FORGES), ids=lambda t: t.value)
async def test_comment_is_created_then_edited(ptype: ProviderType, http: OutboundHTTP) -> None:
    """Reference §4.3: no marker comment by us → create; our marker comment → edit it (not another user's)."""
    forge_info = COMMENT_FORGES[ptype]
    comment = forge_info["comment"]
    marker = forge_info["marker"]
    async with CaptureServer() as srv:
        user_path, user_body = forge_info["user"]
        srv.on("GET", user_path, Reply(200, user_body))
        existing: list[dict[str, Any]] = [comment(1, "someone-else", f"quote: {marker}")]
        srv.on("GET", forge_info["list"], lambda _req: Reply(200, list(existing)))
        notifier = create_notifier(opts(ptype, address=f"{srv.url}{forge_info['address']}", token="tok"))

        await deliver(notifier, make_event(), http)
        method, path = forge_info["create"]
        created = srv.requests[-1]
        assert (created.method, created.path) == (method, path)
        body = created.json()["body"]
        assert body.startswith(marker + "\n\n## Flux Status\n\nℹ️ Kustomization/flux-system/podinfo")
        assert "change_request" not in body

        existing.append(comment(77, "me", body))
        await deliver(notifier, make_event(severity="error", message="now failing"), http)
        method, path = forge_info["edit"]
        edited = srv.requests[-1]
        assert (edited.method, edited.path) == (method, path.format(id=77))
        assert "⚠️" in edited.json()["body"]
        assert "now failing" in edited.json()["body"]


async def test_comment_rejects_a_bad_change_request_number(http: OutboundHTTP) -> None:
    async with CaptureServer() as srv:
        notifier = create_notifier(opts(ProviderType.GITEA_PR_COMMENT, address=f"{srv.url}/o/r", token="t"))
        with pytest.raises(PermanentDeliveryError, match=r'invalid "change_request" metadata value "PR-1"'):
            await deliver(notifier, make_event(metadata={"change_request": "PR-1"}), http)
        assert srv.requests == []


# ----------------------------------------------------------------------------------------------------
# GitHub App (§4.2 "GitHub auth") and githubdispatch
# ----------------------------------------------------------------------------------------------------


def app_secret(url: str, **extra: bytes) -> dict[str, bytes]:
    data = {
        "githubAppID": b"42",
        "githubAppPrivateKey": KEY_PEM,
        "githubAppBaseURL": f"{url}/api/v3".encode(),
    }
    data.update(extra)
    return data


def token_reply(token: str) -> Reply:
    expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Reply(201, {"token": token, "expires_at": expires})


def assert_app_jwt(req: CapturedRequest) -> None:
    scheme, _, token = req.headers["Authorization"].partition(" ")
    assert scheme == "Bearer"
    claims = jwt.decode(token, KEY.public_key(), algorithms=["RS256"])
    assert claims["iss"] == "42"
    assert claims["exp"] - claims["iat"] == 600


async def test_github_app_token_is_minted_exchanged_and_cached(http: OutboundHTTP) -> None:
    """The app JWT is exchanged for an installation token, which authenticates the API calls and is
    reused from the TokenCache by the next delivery (no second exchange)."""
    async with CaptureServer() as srv:
        srv.on("POST", "/api/v3/app/installations/123/access_tokens$", token_reply("ghs_minted_1"))
        srv.on("GET", "/statuses$", Reply(200, []))
        options = opts(
            ProviderType.GITHUB,
            address=f"{srv.url}/o/r",
            secret_data=app_secret(srv.url, githubAppInstallationID=b"123"),
        )
        cache = TokenCache()
        await deliver(create_notifier(options), make_event(), http, tokens=cache)
        await deliver(create_notifier(options), make_event(severity="error"), http, tokens=cache)
        exchanges = [r for r in srv.requests if r.path.endswith("/access_tokens")]
        assert len(exchanges) == 1
        assert_app_jwt(exchanges[0])
        api = [r for r in srv.requests if "/repos/" in r.path]
        assert [r.method for r in api] == ["GET", "POST", "GET", "POST"]
        assert {r.headers["Authorization"] for r in api} == {"Bearer ghs_minted_1"}
        # Without a cache every delivery exchanges a new token.
        await deliver(create_notifier(options), make_event(), http, tokens=None)
        assert len([r for r in srv.requests if r.path.endswith("/access_tokens")]) == 2


async def test_github_app_installation_is_found_by_owner(http: OutboundHTTP) -> None:
    """``githubAppInstallationOwner``: the organisation lookup fails, the user lookup finds it."""
    async with CaptureServer() as srv:
        srv.on("GET", "/api/v3/orgs/octo/installation$", Reply(404, {"message": "Not Found"}))
        srv.on("GET", "/api/v3/users/octo/installation$", Reply(200, {"id": 777}))
        srv.on("POST", "/api/v3/app/installations/777/access_tokens$", token_reply("ghs_owner"))
        options = opts(
            ProviderType.GITHUB_DISPATCH,
            address=f"{srv.url}/octo/r",
            secret_data=app_secret(srv.url, githubAppInstallationOwner=b"octo"),
        )
        event = make_event()
        await deliver(create_notifier(options), event, http, tokens=TokenCache())
        assert calls(srv) == [
            "GET /api/v3/orgs/octo/installation",
            "GET /api/v3/users/octo/installation",
            "POST /api/v3/app/installations/777/access_tokens",
            "POST /api/v3/repos/octo/r/dispatches",
        ]
        dispatch = srv.requests[-1]
        assert dispatch.headers["Authorization"] == "Bearer ghs_owner"
        assert dispatch.json() == {
            "event_type": "Kustomization/podinfo.flux-system",
            "client_payload": json.loads(event.to_go_json()),
        }


async def test_github_app_installation_not_found(http: OutboundHTTP) -> None:
    async with CaptureServer() as srv:
        srv.on("GET", "/installation$", Reply(404, {"message": "Not Found"}))
        options = opts(
            ProviderType.GITHUB_DISPATCH,
            address=f"{srv.url}/octo/r",
            secret_data=app_secret(srv.url, githubAppInstallationOwner=b"octo"),
        )
        with pytest.raises(PermanentDeliveryError) as info:
            await deliver(create_notifier(options), make_event(), http)
    assert "failed to find organization installation" in str(info.value)
    assert "failed to find user installation" in str(info.value)


async def test_github_app_comment_identity_is_the_bot(http: OutboundHTTP) -> None:
    """Reference §4.3: with a GitHub App the comment author is '<app slug>[bot]' (no GET /user)."""
    async with CaptureServer() as srv:
        srv.on("GET", "/api/v3/app$", Reply(200, {"slug": "flux-app"}))
        srv.on("POST", "/access_tokens$", token_reply("ghs_bot"))
        comments = [{"id": 9, "user": {"login": "flux-app[bot]"}, "body": PR_MARKER + "\n\nold"}]
        srv.on("GET", "/issues/42/comments$", Reply(200, comments))
        options = opts(
            ProviderType.GITHUB_PR_COMMENT,
            address=f"{srv.url}/o/r",
            secret_data=app_secret(srv.url, githubAppInstallationID=b"5"),
        )
        await deliver(create_notifier(options), make_event(), http, tokens=TokenCache())
        assert "GET /api/v3/user" not in calls(srv)
        assert_app_jwt(srv.requests[0])
        assert calls(srv)[-1] == "PATCH /api/v3/repos/o/r/issues/comments/9"
        assert srv.requests[-1].headers["Authorization"] == "Bearer ghs_bot"


# ----------------------------------------------------------------------------------------------------
# NATS against a real nats-server (§4.1)
# ----------------------------------------------------------------------------------------------------


async def _receive(
    url: str, subject: str, notifier: Notifier, http: OutboundHTTP, event: Event, **auth: Any
) -> bytes:
    import nats

    client = await nats.connect(url, allow_reconnect=False, **auth)
    try:
        sub = await client.subscribe(subject)
        await client.flush()
        await deliver(notifier, event, http)
        msg = await sub.next_msg(timeout=10)
        return bytes(msg.data)
    finally:
        await client.close()


async def _receive_templated(
    url: str, subject: str, notifier: Notifier, http: OutboundHTTP, event: Event
) -> bytes:
    import nats

    client = await nats.connect(url, allow_reconnect=False)
    try:
        sub = await client.subscribe(subject)
        await client.flush()
        await deliver(notifier, event, http, template=TEMPLATE)
        msg = await sub.next_msg(timeout=10)
        return bytes(msg.data)
    finally:
        await client.close()


TEMPLATE = Message("Deployed webapp", "webapp is at main@0123456\n(2 files)", "info")


async def test_nats_publishes_a_templates_message_in_the_event(http: OutboundHTTP) -> None:
    """Issue 15: the forwarded event carries the Alert template's message; the rest is Flux's event."""
    event = make_event()
    async with run_nats_server("") as srv:
        notifier = create_notifier(opts(ProviderType.NATS, address=srv.url, channel="tpl"))
        data = await _receive_templated(srv.url, "tpl", notifier, http, event)
    expected = event.model_copy(update={"message": TEMPLATE.text}).to_go_json()
    assert data == expected
    assert json.loads(data)["message"] == "webapp is at main@0123456\n(2 files)"


async def test_nats_publishes_the_event_json(http: OutboundHTTP) -> None:
    """The subscriber receives exactly the event JSON (Flux's bytes) on the channel subject."""
    event = make_event()
    async with run_nats_server("authorization { user: flux, password: nats-pass-1 }\n") as srv:
        notifier = create_notifier(
            opts(
                ProviderType.NATS,
                address=srv.url,
                channel="flux.events",
                username="flux",
                password="nats-pass-1",
            )
        )
        data = await _receive(
            srv.url, "flux.events", notifier, http, event, user="flux", password="nats-pass-1"
        )
        assert data == event.to_go_json()
        wrong = create_notifier(
            opts(
                ProviderType.NATS,
                address=srv.url,
                channel="flux.events",
                username="flux",
                password="wrong-pass-9",
            )
        )
        with pytest.raises(PermanentDeliveryError) as info:
            await deliver(wrong, event, http)
        assert "error publishing event to subject flux.events: error connecting to server" in str(info.value)
        assert "wrong-pass-9" not in str(info.value)


async def test_nats_nkey_and_creds_authentication(http: OutboundHTTP) -> None:
    """Secret ``nkey`` (seed) and ``creds`` (user JWT + seed) authenticate against a real server."""
    event = make_event()
    user = nkey_user()
    async with run_nats_server(f"authorization {{ users = [ {{ nkey: {user.public} }} ] }}\n") as srv:
        notifier = create_notifier(
            opts(ProviderType.NATS, address=srv.url, channel="nk", secret_data={"nkey": user.seed.encode()})
        )
        assert (
            await _receive(srv.url, "nk", notifier, http, event, nkeys_seed_str=user.seed)
            == event.to_go_json()
        )
    auth = jwt_auth()
    async with run_nats_server(auth.server_config) as srv:
        from nats.aio.client import RawCredentials

        notifier = create_notifier(
            opts(
                ProviderType.NATS, address=srv.url, channel="jwt", secret_data={"creds": auth.creds.encode()}
            )
        )
        data = await _receive(
            srv.url, "jwt", notifier, http, event, user_credentials=RawCredentials(auth.creds)
        )
        assert data == event.to_go_json()


async def test_nats_unreachable_server_is_retryable(http: OutboundHTTP) -> None:
    async with run_nats_server() as srv:
        url = srv.url
    notifier = create_notifier(opts(ProviderType.NATS, address=url, channel="x", timeout=5.0))
    with pytest.raises(RetryableDeliveryError, match="error connecting to server"):
        await deliver(notifier, make_event(), http)


# ----------------------------------------------------------------------------------------------------
# Google Pub/Sub, Azure Event Hubs, OTEL
# ----------------------------------------------------------------------------------------------------


def service_account(token_uri: str) -> str:
    return json.dumps(
        {
            "type": "service_account",
            "private_key_id": "kid-7",
            "private_key": KEY_PEM.decode(),
            "client_email": "flux@proj.iam.gserviceaccount.com",
            "token_uri": token_uri,
        }
    )


async def test_pubsub_exchanges_a_token_and_publishes(
    http: OutboundHTTP, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JWT-bearer grant at the key's token_uri, then a publish with base64 data and attributes."""
    async with CaptureServer() as srv:
        monkeypatch.setenv("NC_GOOGLE_PUBSUB_API_URL", srv.url)
        srv.on(
            "POST",
            "/token$",
            Reply(200, {"access_token": "ya29.local", "expires_in": 3599, "token_type": "Bearer"}),
        )
        srv.on("POST", ":publish$", Reply(200, {"messageIds": ["1"]}))
        options = opts(
            ProviderType.GOOGLE_PUBSUB,
            address="proj",
            channel="flux-topic",
            token=service_account(f"{srv.url}/token"),
            headers={"env": "prod"},
        )
        event = make_event()
        cache = TokenCache()
        await deliver(create_notifier(options), event, http, tokens=cache)
        await deliver(create_notifier(options), event, http, tokens=cache)
        assert calls(srv) == [
            "POST /token",
            "POST /v1/projects/proj/topics/flux-topic:publish",
            "POST /v1/projects/proj/topics/flux-topic:publish",
        ]
        form = parse_qs(srv.requests[0].text())
        assertion = jwt.decode(
            form["assertion"][0], KEY.public_key(), algorithms=["RS256"], audience=f"{srv.url}/token"
        )
        assert assertion["iss"] == "flux@proj.iam.gserviceaccount.com"
        publish = srv.requests[1]
        assert publish.headers["Authorization"] == "Bearer ya29.local"
        message = publish.json()["messages"][0]
        assert base64.b64decode(message["data"]) == event.to_go_json()
        assert message["attributes"] == {"env": "prod"}
        # Issue 15: an Alert template's message replaces the event's in the published data.
        await deliver(create_notifier(options), event, http, tokens=cache, template=TEMPLATE)
        data = json.loads(base64.b64decode(srv.requests[-1].json()["messages"][0]["data"]))
        assert data["message"] == TEMPLATE.text
        assert data["involvedObject"] == json.loads(event.to_go_json())["involvedObject"]


async def test_pubsub_error_names_the_topic(http: OutboundHTTP, monkeypatch: pytest.MonkeyPatch) -> None:
    async with CaptureServer() as srv:
        monkeypatch.setenv("NC_GOOGLE_PUBSUB_API_URL", srv.url)
        srv.on("POST", "/token$", Reply(200, {"access_token": "ya29.leaky", "expires_in": 3599}))
        srv.on("POST", ":publish$", Reply(403, {"error": "denied for ya29.leaky"}))
        options = opts(
            ProviderType.GOOGLE_PUBSUB, address="proj", channel="t", token=service_account(f"{srv.url}/token")
        )
        with pytest.raises(PermanentDeliveryError) as info:
            await deliver(create_notifier(options), make_event(), http)
    assert str(info.value).startswith("error publishing to GCP Pub/Sub topic projects/proj/topics/t: ")
    assert "ya29.leaky" not in str(info.value)


async def test_eventhub_jwt_mode_sends_bearer(http: OutboundHTTP) -> None:
    """Static JWT mode: address = hub, channel = namespace (here a local URL), token as Bearer."""
    async with CaptureServer() as srv:
        srv.on("POST", "/messages$", Reply(201, b""))
        notifier = create_notifier(
            opts(ProviderType.AZURE_EVENT_HUB, address="hub-1", channel=srv.url, token="eyJ.static")
        )
        event = make_event()
        await deliver(notifier, event, http)
        req = srv.requests[0]
        assert (req.method, req.path, req.query["api-version"]) == ("POST", "/hub-1/messages", "2014-01")
        assert req.headers["Authorization"] == "Bearer eyJ.static"
        assert req.body == event.to_go_json()
        await deliver(notifier, event, http, template=TEMPLATE)
        assert srv.requests[-1].body == event.model_copy(update={"message": TEMPLATE.text}).to_go_json()


def otel_alert() -> Alert:
    return Alert.model_validate(
        {
            "metadata": {"name": "webapp", "namespace": "apps", "uid": "alert-uid-9"},
            "spec": {
                "providerRef": {"name": "otel"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
            },
        }
    )


async def test_otel_exports_one_span_per_event(http: OutboundHTTP) -> None:
    """Reference §4.4: OTLP/HTTP protobuf with the Alert's resource, the trace id from alert UID + revision."""
    async with CaptureServer() as srv:
        notifier = create_notifier(
            opts(
                ProviderType.OTEL,
                address=f"{srv.url}/v1/traces",
                token="otel-tok",
                headers={"X-Tenant": "t1"},
            )
        )
        await deliver(notifier, make_event(), http, alert=otel_alert())
        req = srv.requests[0]
        assert (req.method, req.path) == ("POST", "/v1/traces")
        assert req.headers["Content-Type"] == "application/x-protobuf"
        assert req.headers["Authorization"] == "Bearer otel-tok"
        assert req.headers["X-Tenant"] == "t1"
        span = ExportTraceServiceRequest.FromString(req.body).resource_spans[0].scope_spans[0].spans[0]
        expected = hashlib.sha256(f"alert-uid-9:main@sha1:{SHA}".encode()).digest()[:16]
        assert span.trace_id == expected
        assert len(span.span_id) == 8
        assert span.name == "Kustomization: flux-system/podinfo"
        assert "flux.message" not in {a.key for a in span.attributes}
        # Issue 15: a template's message is the span's flux.message attribute and an error's status text;
        # the span name keeps naming the object.
        failed = make_event(severity="error", message="health check failed")
        await deliver(notifier, failed, http, alert=otel_alert(), template=TEMPLATE)
        span = (
            ExportTraceServiceRequest.FromString(srv.requests[-1].body)
            .resource_spans[0]
            .scope_spans[0]
            .spans[0]
        )
        assert span.name == "Kustomization: flux-system/podinfo"
        assert {a.key: a.value.string_value for a in span.attributes}["flux.message"] == TEMPLATE.text
        assert span.status.message == TEMPLATE.text
        # HelmRepository events are not traced; a missing Alert is an error.
        helm = make_event(
            involvedObject={"kind": "HelmRepository", "name": "charts", "namespace": "flux-system"}
        )
        await deliver(notifier, helm, http, alert=otel_alert())
        assert len(srv.requests) == 2
        with pytest.raises(DeliveryError, match="alert metadata not found in context") as info:
            await deliver(notifier, make_event(), http)
        assert info.value.failure is FailureReason.INTERNAL

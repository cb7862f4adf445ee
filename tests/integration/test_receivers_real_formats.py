"""Deliveries in the exact formats real senders use, against the receiver app (reference §5.3, §5.6).

GitHub (documented test vector, ping, form encoding, the signature header rules), GitLab, Bitbucket Server,
Harbor, Nexus, DockerHub, Quay, ACR, a CloudEvents CDEvent, and gcr / generic-oidc against a local OIDC issuer
with its own keys, including every negative case of checklist A15.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from notification_controller.api.receiver import Receiver
from notification_controller.core.clock import ManualClock
from notification_controller.errors import VerificationError
from notification_controller.receivers import registry
from notification_controller.receivers.base import GCRSettings, HookRequest, RawHeaders, VerifyContext
from notification_controller.receivers.oidc import OIDCClient
from notification_controller.server.receivers import ReceiverServerSettings
from tests.support.receiver_kit import (
    ACR_BODY,
    CDEVENT_BODY,
    DOCKERHUB_BODY,
    GCR_AUDIENCE,
    GCR_EMAIL,
    GIT,
    GOOGLE_ISSUER,
    IMAGE,
    NEXUS_BODY,
    QUAY_BODY,
    TOKEN,
    Harness,
    LocalIssuer,
    github_signature,
    make_receiver,
    pubsub_body,
    token_claims,
    unsigned_token,
)

GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_PAYLOAD = b"Hello, World!"
GITHUB_EXPECTED = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
PUSH = json.dumps(
    {
        "ref": "refs/heads/main",
        "before": "6113728f",
        "after": "59b20b8d",
        "repository": {"full_name": "org/webapp"},
    },
    indent=2,
).encode()


@pytest.fixture
async def issuer() -> AsyncIterator[LocalIssuer]:
    async with LocalIssuer() as running:
        yield running


async def serve(
    receiver: Receiver, secret: Any, settings: ReceiverServerSettings | None = None
) -> tuple[Harness, str]:
    harness = Harness(settings)
    path = harness.add(receiver, secret)
    harness.add_targets()
    harness.cluster.add(IMAGE, "ImageRepository", "default", "other-app", labels={"registry": "gar"})
    return harness, path


# ---- GitHub ---------------------------------------------------------------------------------------


async def test_github_documented_test_vector() -> None:
    """docs.github.com "Validating webhook deliveries": the signature our helper (and GitHub) compute."""
    assert github_signature(GITHUB_SECRET.encode(), GITHUB_PAYLOAD) == "sha256=" + GITHUB_EXPECTED


async def test_github_test_vector_delivery_is_accepted() -> None:
    """Checklist A1 with GitHub's vector: one annotation patch."""
    receiver, secret = make_receiver("github", token=GITHUB_SECRET)
    h, path = await serve(receiver, secret)
    async with h:
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "d1",
            "X-Hub-Signature-256": "sha256=" + GITHUB_EXPECTED,
        }
        assert (await h.post(path, GITHUB_PAYLOAD, headers))[0] == 200
        assert h.cluster.annotated() == [("GitRepository", "default", "webapp")]


def _gh(body: bytes, *, event: str = "push", delivery: str = "d-1", **extra: str) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(TOKEN.encode(), body),
    }
    headers.update(extra)
    return headers


async def test_github_ping_answers_200_without_patch() -> None:
    """Pinned: ``ping`` (hook creation) is acknowledged even when not in spec.events; nothing is triggered."""
    receiver, secret = make_receiver("github", events=["push"])
    h, path = await serve(receiver, secret)
    ping = json.dumps(
        {"zen": "Design for failure.", "hook_id": 12345678, "hook": {"type": "Repository"}}
    ).encode()
    async with h:
        assert (await h.post(path, ping, _gh(ping, event="ping")))[0] == 200
        assert h.cluster.annotate_calls == []
        assert h.metric("notification_receiver_requests_total", type="github", outcome="ping") == 1
        bad = _gh(ping, event="ping")
        bad["X-Hub-Signature-256"] = github_signature(b"wrong", ping)
        assert (await h.post(path, ping, bad))[0] == 400, "a ping must be signed too"


async def test_github_form_encoded_delivery() -> None:
    """reference §5.3: x-www-form-urlencoded, payload = form field, MAC over the raw form body."""
    receiver, secret = make_receiver("github")
    h, path = await serve(receiver, secret)
    form = urlencode({"payload": PUSH.decode()}).encode()
    async with h:
        headers = _gh(form, **{"Content-Type": "application/x-www-form-urlencoded"})
        assert (await h.post(path, form, headers))[0] == 200
        headers["X-Hub-Signature-256"] = github_signature(TOKEN.encode(), PUSH)  # MAC of the payload: wrong
        assert (await h.post(path, form, headers))[0] == 400
        assert len(h.cluster.annotate_calls) == 1


SIG = github_signature(TOKEN.encode(), PUSH)
SHA1 = github_signature(TOKEN.encode(), PUSH, "sha1")
HEX = SIG.removeprefix("sha256=")


@pytest.mark.parametrize(
    ("case", "headers", "expected"),
    [
        ("A1 valid", {"X-Hub-Signature-256": SIG}, 200),
        ("A2 empty", {"X-Hub-Signature-256": ""}, 400),
        ("A2 only prefix", {"X-Hub-Signature-256": "sha256="}, 400),
        ("A2 not hex", {"X-Hub-Signature-256": "sha256=" + "zz" * 32}, 400),
        ("A2 odd length", {"X-Hub-Signature-256": SIG[:-1]}, 400),
        ("A2 uppercase hex (pinned)", {"X-Hub-Signature-256": "sha256=" + HEX.upper()}, 400),
        ("A2 inner whitespace", {"X-Hub-Signature-256": "sha256= " + HEX}, 400),
        ("A2 outer whitespace (stripped by HTTP, as in Go)", {"X-Hub-Signature-256": " " + SIG + " "}, 200),
        ("A2 no '='", {"X-Hub-Signature-256": "sha256" + HEX}, 400),
        ("A2 unknown algo", {"X-Hub-Signature-256": "md5=" + HEX}, 400),
        ("A6 legacy sha1 only (pinned: accepted, as go-github)", {"X-Hub-Signature": SHA1}, 200),
        ("A6 sha1 inside the -256 header", {"X-Hub-Signature-256": SHA1}, 400),
        (
            "A7 -256 valid, legacy wrong",
            {"X-Hub-Signature-256": SIG, "X-Hub-Signature": "sha1=" + "0" * 40},
            200,
        ),
        (
            "A7 -256 wrong, legacy valid",
            {"X-Hub-Signature-256": "sha256=" + "0" * 64, "X-Hub-Signature": SHA1},
            400,
        ),
        ("A2 missing", {}, 400),
        ("B10 text/plain", {"X-Hub-Signature-256": SIG, "Content-Type": "text/plain"}, 400),
        (
            "B10 multipart",
            {"X-Hub-Signature-256": SIG, "Content-Type": "multipart/form-data; boundary=x"},
            400,
        ),
        (
            "B10 charset param ok",
            {"X-Hub-Signature-256": SIG, "Content-Type": "application/json; charset=utf-8"},
            200,
        ),
    ],
)
async def test_github_signature_header_rules(case: str, headers: dict[str, str], expected: int) -> None:
    """Checklist A2, A6, A7, B10 — each choice pinned (docs/receivers/README.md)."""
    receiver, secret = make_receiver("github")
    h, path = await serve(receiver, secret)
    base = {"Content-Type": "application/json", "X-GitHub-Event": "push"}
    async with h:
        status, _, _ = await h.post(path, PUSH, {**base, **headers})
        assert status == expected, case
        assert len(h.cluster.annotate_calls) == (1 if expected == 200 else 0)


async def test_github_body_changes_are_detected() -> None:
    """Checklist A3 (one byte changed) and A4 (re-serialised JSON): the MAC is over the raw bytes."""
    receiver, secret = make_receiver("github")
    h, path = await serve(receiver, secret)
    async with h:
        changed = PUSH.replace(b"main", b"mait")
        assert (await h.post(path, changed, _gh(PUSH)))[0] == 400
        compact = json.dumps(json.loads(PUSH), separators=(",", ":")).encode()
        assert compact != PUSH
        assert (await h.post(path, compact, _gh(PUSH)))[0] == 400
        assert h.cluster.annotate_calls == []


async def test_github_duplicate_signature_header_is_refused() -> None:
    """Checklist A8 (pinned): two values of an authentication header are ambiguous → 400, no 500."""
    receiver, secret = make_receiver("github")
    _, path = await serve(receiver, secret)
    req = HookRequest(
        "POST",
        path,
        RawHeaders(
            [
                (b"Content-Type", b"application/json"),
                (b"X-Hub-Signature-256", SIG.encode()),
                (b"X-Hub-Signature-256", SIG.encode()),
                (b"X-GitHub-Event", b"push"),
            ]
        ),
        PUSH,
    )
    with pytest.raises(VerificationError, match="repeated"):
        await registry.verify(req, VerifyContext(receiver, secret, ManualClock()))


@pytest.mark.parametrize(
    "value", [SIG.encode() + b" ", b"\xc3\xa9\xff", b"sha256=\xc3\xa9\xff", SIG.encode() + b"\x00"]
)
async def test_github_malformed_signature_bytes_are_400_not_500(value: bytes) -> None:
    """Checklist A2/A5 at the verifier: raw non-ASCII / invalid UTF-8 / padded bytes → VerificationError."""
    receiver, secret = make_receiver("github")
    headers = RawHeaders(
        [
            (b"Content-Type", b"application/json"),
            (b"X-Hub-Signature-256", value),
            (b"X-GitHub-Event", b"push"),
        ]
    )
    with pytest.raises(VerificationError):
        await registry.verify(
            HookRequest("POST", "/hook/x", headers, PUSH), VerifyContext(receiver, secret, ManualClock())
        )


# ---- GitLab, Bitbucket, Harbor, Nexus ------------------------------------------------------------------

GITLAB_PUSH = json.dumps(
    {
        "object_kind": "push",
        "event_name": "push",
        "ref": "refs/heads/main",
        "project": {"path_with_namespace": "org/webapp"},
    }
).encode()


async def test_gitlab_push_with_token() -> None:
    """reference §5.3 gitlab; checklist A10 (pinned: the Secret value is NOT trimmed)."""
    receiver, secret = make_receiver("gitlab", events=["Push Hook", "Tag Push Hook"])
    h, path = await serve(receiver, secret)
    headers = {
        "Content-Type": "application/json",
        "X-Gitlab-Event": "Push Hook",
        "X-Gitlab-Token": TOKEN,
        "X-Gitlab-Instance": "https://gitlab.com",
        "X-Gitlab-Event-UUID": "13792a34",
    }
    async with h:
        assert (await h.post(path, GITLAB_PUSH, headers))[0] == 200
        for bad in ("", "nope", TOKEN + "x", TOKEN.upper()):
            assert (
                await h.post(
                    path, GITLAB_PUSH, {**headers, "X-Gitlab-Token": bad, "X-Gitlab-Event-UUID": bad}
                )
            )[0] == 400
        assert len(h.cluster.annotate_calls) == 1

    newline, nsecret = make_receiver("gitlab", name="nl", token=TOKEN + "\n")
    h, path = await serve(newline, nsecret)
    async with h:
        assert (await h.post(path, GITLAB_PUSH, headers))[0] == 400, (
            "a trailing newline in the Secret never matches"
        )
        assert h.cluster.annotate_calls == []


async def test_empty_token_never_authenticates() -> None:
    """Pinned: with an empty ``token`` Flux matched a missing header (gitlab/harbor) or skipped the MAC (github)."""
    for type_, headers in (
        ("gitlab", {"X-Gitlab-Event": "Push Hook"}),
        ("harbor", {}),
        ("github", {"X-GitHub-Event": "push"}),
        ("generic-hmac", {"X-Signature": github_signature(b"", GITLAB_PUSH)}),
    ):
        receiver, secret = make_receiver(type_, token="")
        h, path = await serve(receiver, secret)
        async with h:
            status, _, _ = await h.post(path, GITLAB_PUSH, {"Content-Type": "application/json", **headers})
            assert status == 400, type_
            assert h.cluster.annotate_calls == []


BITBUCKET_PUSH = json.dumps(
    {
        "eventKey": "repo:refs_changed",
        "date": "2026-01-01T00:00:00+0000",
        "actor": {"name": "admin"},
        "repository": {"slug": "webapp", "project": {"key": "ORG"}},
        "changes": [
            {"ref": {"id": "refs/heads/main"}, "fromHash": "0" * 40, "toHash": "1" * 40, "type": "UPDATE"}
        ],
    }
).encode()


async def test_bitbucket_server_hmac_and_ping() -> None:
    """Checklist A12: valid / invalid ``X-Hub-Signature: sha256=``; ``diagnostics:ping`` → 200 without patch."""
    receiver, secret = make_receiver("bitbucket", events=["repo:refs_changed"])
    h, path = await serve(receiver, secret)
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "X-Event-Key": "repo:refs_changed",
        "X-Request-Id": "7b0f2ff3",
        "X-Hub-Signature": github_signature(TOKEN.encode(), BITBUCKET_PUSH),
    }
    async with h:
        assert (await h.post(path, BITBUCKET_PUSH, headers))[0] == 200
        wrong = {
            **headers,
            "X-Request-Id": "x2",
            "X-Hub-Signature": github_signature(b"other", BITBUCKET_PUSH),
        }
        assert (await h.post(path, BITBUCKET_PUSH, wrong))[0] == 400
        ping = b'{"test": true}'
        ping_headers = {
            **headers,
            "X-Event-Key": "diagnostics:ping",
            "X-Request-Id": "p1",
            "X-Hub-Signature": github_signature(TOKEN.encode(), ping),
        }
        assert (await h.post(path, ping, ping_headers))[0] == 200
        assert len(h.cluster.annotate_calls) == 1
        assert h.metric("notification_receiver_requests_total", type="bitbucket", outcome="ping") == 1


async def test_harbor_authorization_header() -> None:
    """Checklist A13: matches / differs / missing (no scheme added or stripped)."""
    receiver, secret = make_receiver(
        "harbor", resources=[{"apiVersion": IMAGE, "kind": "ImageRepository", "name": "webapp"}]
    )
    h, path = await serve(receiver, secret)
    body = json.dumps(
        {
            "type": "PUSH_ARTIFACT",
            "occur_at": 1767225600,
            "operator": "admin",
            "event_data": {
                "resources": [
                    {
                        "digest": "sha256:7d1e",
                        "tag": "v1.0.0",
                        "resource_url": "harbor.example.com/library/webapp:v1.0.0",
                    }
                ],
                "repository": {"name": "webapp", "namespace": "library"},
            },
        }
    ).encode()
    async with h:
        assert (await h.post(path, body, {"Content-Type": "application/json", "Authorization": TOKEN}))[
            0
        ] == 200
        assert (await h.post(path, body, {"Authorization": f"Bearer {TOKEN}"}))[0] == 400
        assert (await h.post(path, body, {}))[0] == 400
        assert h.cluster.annotated() == [("ImageRepository", "default", "webapp")]


async def test_nexus_hmac_sha1() -> None:
    """Checklist A14: valid / invalid / missing ``X-Nexus-Webhook-Signature`` (lowercase hex HMAC-SHA1)."""
    receiver, secret = make_receiver("nexus")
    h, path = await serve(receiver, secret)
    sig = hmac.new(TOKEN.encode(), NEXUS_BODY, hashlib.sha1).hexdigest()
    async with h:
        assert (await h.post(path, NEXUS_BODY, {"X-Nexus-Webhook-Signature": sig}))[0] == 200
        assert (await h.post(path, NEXUS_BODY, {"X-Nexus-Webhook-Signature": sig.upper()}))[0] == 400
        assert (await h.post(path, NEXUS_BODY, {"X-Nexus-Webhook-Signature": "0" * 40}))[0] == 400
        assert (await h.post(path, NEXUS_BODY, {}))[0] == 400
        not_json = b"not json"
        signed = hmac.new(TOKEN.encode(), not_json, hashlib.sha1).hexdigest()
        assert (await h.post(path, not_json, {"X-Nexus-Webhook-Signature": signed}))[0] == 400
        assert len(h.cluster.annotate_calls) == 1


# ---- registries without authentication, CDEvents ----------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "body", "bad"),
    [
        ("dockerhub", DOCKERHUB_BODY, [b"", b"[]", b'{"repository":{"repo_url":1}}', b"{nope"]),
        ("quay", QUAY_BODY, [b"", b'{"docker_url":["x"]}', b'{"updated_tags":[1]}']),
        ("acr", ACR_BODY, [b"", b'{"action":1}', b'{"target":{"tag":true}}', b"NaN"]),
    ],
)
async def test_registry_payloads(type_: str, body: bytes, bad: list[bytes]) -> None:
    """reference §5.3: the payload shapes; Go leniency kept (unknown fields ignored, case-insensitive names)."""
    receiver, secret = make_receiver(
        type_, resources=[{"apiVersion": IMAGE, "kind": "ImageRepository", "name": "webapp"}]
    )
    h, path = await serve(receiver, secret)
    async with h:
        assert (await h.post(path, body, {"Content-Type": "application/json"}))[0] == 200
        assert (await h.post(path, b"null", {"Content-Type": "application/json"}))[0] == 200, (
            "Go accepts null"
        )
        for payload in bad:
            assert (await h.post(path, payload, {"Content-Type": "application/json"}))[0] == 400, payload
        assert len(h.cluster.annotate_calls) == 2


async def test_cdevent_in_cloudevents_binary_mode() -> None:
    """reference §5.3 cdevents: structure validated, then ``Ce-Type`` against spec.events; ``ce-id`` dedups."""
    receiver, secret = make_receiver("cdevents", events=["dev.cdevents.change.merged.0.2.0"])
    h, path = await serve(receiver, secret)
    headers = {
        "Content-Type": "application/json",
        "Ce-Specversion": "1.0",
        "Ce-Source": "/event/source/123",
        "Ce-Type": "dev.cdevents.change.merged.0.2.0",
        "Ce-Id": "271069a8",
    }
    async with h:
        assert (await h.post(path, CDEVENT_BODY, headers))[0] == 200
        assert (await h.post(path, CDEVENT_BODY, headers))[0] == 200
        assert len(h.cluster.annotate_calls) == 1, "same ce-id: replay, not patched twice"
        event = json.loads(CDEVENT_BODY)
        mutations: list[Callable[[dict[str, Any]], object]] = [
            lambda e: e["context"].pop("id"),
            lambda e: e["context"].pop("timestamp"),
            lambda e: e["context"].update(type="dev.cdevents.change.exploded.0.2.0"),
            lambda e: e["context"].update(type="dev.cdevents.change.merged.1.0.0"),
            lambda e: e["context"].update(type="dev.cdeventsx.tool-thing.happened.0.1.0"),
            lambda e: e["context"].update(timestamp="yesterday"),
            lambda e: e["subject"].pop("id"),
            lambda e: e["subject"].update(type="build"),
            lambda e: e.pop("subject"),
        ]
        for mutate in mutations:
            broken = json.loads(CDEVENT_BODY)
            mutate(broken)
            status, _, _ = await h.post(
                path, json.dumps(broken).encode(), {**headers, "Ce-Id": str(id(mutate))}
            )
            assert status == 400, broken
        assert event["context"]["type"] == "dev.cdevents.change.merged.0.2.0"
        other = {**headers, "Ce-Type": "dev.cdevents.change.created.0.3.0", "Ce-Id": "x"}
        assert (await h.post(path, CDEVENT_BODY, other))[0] == 400, "Ce-Type not in spec.events"
        assert len(h.cluster.annotate_calls) == 1


# ---- compare_digest everywhere --------------------------------------------------------------------------


async def test_every_comparison_uses_compare_digest_on_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checklist A9: github, bitbucket, nexus, generic-hmac AND the plain-token types use ``compare_digest``."""
    calls: list[tuple[Any, Any]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    body = NEXUS_BODY
    requests: dict[str, list[tuple[bytes, bytes]]] = {
        "github": [
            (b"Content-Type", b"application/json"),
            (b"X-GitHub-Event", b"push"),
            (b"X-Hub-Signature-256", github_signature(TOKEN.encode(), body).encode()),
        ],
        "bitbucket": [
            (b"Content-Type", b"application/json"),
            (b"X-Event-Key", b"repo:refs_changed"),
            (b"X-Hub-Signature", github_signature(TOKEN.encode(), body).encode()),
        ],
        "generic-hmac": [(b"X-Signature", github_signature(TOKEN.encode(), body, "sha512").encode())],
        "nexus": [
            (b"X-Nexus-Webhook-Signature", hmac.new(TOKEN.encode(), body, hashlib.sha1).hexdigest().encode())
        ],
        "gitlab": [(b"X-Gitlab-Token", TOKEN.encode()), (b"X-Gitlab-Event", b"Push Hook")],
        "harbor": [(b"Authorization", TOKEN.encode())],
    }
    for type_, headers in requests.items():
        calls.clear()
        receiver, secret = make_receiver(type_)
        req = HookRequest("POST", "/hook/x", RawHeaders(headers), body)
        await registry.verify(req, VerifyContext(receiver, secret, ManualClock()))
        assert len(calls) == 1, type_
        assert all(isinstance(a, bytes) and isinstance(b, bytes) for a, b in calls), type_


# ---- gcr and generic-oidc against a local OIDC issuer -------------------------------------------------


def _gcr_receiver(**secret_overrides: str | None) -> tuple[Receiver, Any]:
    data = {"email": GCR_EMAIL, "audience": GCR_AUDIENCE}
    data.update(secret_overrides)  # type: ignore[arg-type]
    return make_receiver(
        "gcr",
        secret_data={k: v for k, v in data.items() if v is not None},
        resources=[
            {"apiVersion": IMAGE, "kind": "ImageRepository", "name": "*", "matchLabels": {"registry": "gar"}}
        ],
        resource_filter="req.tag.contains(res.metadata.name)",
    )


GCR_DATA = {
    "action": "INSERT",
    "digest": "europe-docker.pkg.dev/p/r/other-app@sha256:6ec1",
    "tag": "europe-docker.pkg.dev/p/r/other-app:v1.2.3",
}


def _gcr_claims(h: Harness, **overrides: Any) -> dict[str, Any]:
    base = {
        "iss": GOOGLE_ISSUER,
        "aud": GCR_AUDIENCE,
        "email": GCR_EMAIL,
        "email_verified": True,
        "azp": "1234567890",
        "sub": "1234567890",
    }
    base.update(overrides)
    return token_claims(h.clock.now(), **base)


async def test_gcr_pubsub_push_with_google_token(issuer: LocalIssuer) -> None:
    """reference §5.3 gcr; the Flux doc example ``resourceFilter: req.tag.contains(res.metadata.name)``."""
    receiver, secret = _gcr_receiver()
    h, path = await serve(receiver, secret, ReceiverServerSettings(gcr=GCRSettings(jwks_url=issuer.jwks_url)))
    async with h:
        for alg in ("RS256", "ES256"):
            token = issuer.mint(_gcr_claims(h, jti=alg), alg=alg)
            body = pubsub_body({**GCR_DATA, "tag": GCR_DATA["tag"] + alg})
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            assert (await h.post(path, body.replace(b"136969346945", alg.encode()), headers))[0] == 200
        assert h.cluster.annotated() == [("ImageRepository", "default", "other-app")] * 2
        assert issuer.requests.count("/jwks") == 1, "the key set is cached"


GCR_NEGATIVES: list[tuple[str, Callable[[Harness, LocalIssuer], str], dict[str, str | None], str]] = [
    (
        "other email (CVE-2026-40109)",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h, email="attacker@gmail.com")),
        {},
        "email does not match",
    ),
    (
        "wrong aud",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h, aud="https://elsewhere")),
        {},
        "expected audience",
    ),
    (
        "email_verified false",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h, email_verified=False)),
        {},
        "not verified",
    ),
    (
        "email_verified string",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h, email_verified="true")),
        {},
        "not verified",
    ),
    (
        "expired",
        lambda h, i: (
            "Bearer " + i.mint(_gcr_claims(h, exp=int((h.clock.now() - timedelta(seconds=1)).timestamp())))
        ),
        {},
        "token is expired",
    ),
    ("no exp", lambda h, i: "Bearer " + i.mint(_gcr_claims(h, exp=None)), {}, "no valid 'exp'"),
    (
        "wrong iss",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h, iss="https://evil.example.com")),
        {},
        "different provider",
    ),
    ("alg none", lambda h, i: "Bearer " + unsigned_token(_gcr_claims(h)), {}, "unsupported algorithm"),
    (
        "HS256 with the public key",
        lambda h, i: "Bearer " + _hs256(_gcr_claims(h)),
        {},
        "unsupported algorithm",
    ),
    (
        "unpublished key",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h), key=i.other),
        {},
        "failed to verify signature",
    ),
    ("no Bearer prefix", lambda h, i: i.mint(_gcr_claims(h)), {}, "missing or malformed"),
    ("bearer lowercase", lambda h, i: "bearer " + i.mint(_gcr_claims(h)), {}, "missing or malformed"),
    ("empty bearer", lambda h, i: "Bearer ", {}, "missing or malformed"),
    ("not a JWT", lambda h, i: "Bearer abc.def", {}, "malformed jwt header"),
    (
        "secret missing email",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h)),
        {"email": None},
        "required field 'email'",
    ),
    (
        "secret missing audience",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h)),
        {"audience": None},
        "required field 'audience'",
    ),
    (
        "secret empty email",
        lambda h, i: "Bearer " + i.mint(_gcr_claims(h)),
        {"email": ""},
        "required field 'email'",
    ),
]


def _hs256(claims: dict[str, Any]) -> str:
    import jwt

    return jwt.encode(
        claims, "a-shared-secret-that-is-long-enough-for-hs256", algorithm="HS256", headers={"kid": "rsa-1"}
    )


@pytest.mark.parametrize(
    ("case", "authorization", "secret", "reason"), GCR_NEGATIVES, ids=[c[0] for c in GCR_NEGATIVES]
)
async def test_gcr_negative_cases(
    issuer: LocalIssuer,
    caplog: pytest.LogCaptureFixture,
    case: str,
    authorization: Callable[[Harness, LocalIssuer], str],
    secret: dict[str, str | None],
    reason: str,
) -> None:
    """Checklist A15: every case → 400 and no patch, refused for the stated reason."""
    caplog.set_level(logging.INFO, logger="notification_controller")
    receiver, sec = _gcr_receiver(**secret)
    h, path = await serve(receiver, sec, ReceiverServerSettings(gcr=GCRSettings(jwks_url=issuer.jwks_url)))
    async with h:
        headers = {"Content-Type": "application/json", "Authorization": authorization(h, issuer)}
        status, data, _ = await h.post(path, pubsub_body(GCR_DATA), headers)
        assert (status, data) == (400, b""), case
        assert h.cluster.annotate_calls == []
    assert any(reason in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


async def test_gcr_bad_message_data_is_400(issuer: LocalIssuer) -> None:
    """Checklist A16: ``message.data`` not base64, or not JSON once decoded → 400, never 500."""
    receiver, secret = _gcr_receiver()
    h, path = await serve(receiver, secret, ReceiverServerSettings(gcr=GCRSettings(jwks_url=issuer.jwks_url)))
    async with h:
        headers = {
            "Content-Type": "application/json",
            "Authorization": "Bearer " + issuer.mint(_gcr_claims(h)),
        }
        for data in (
            "%%%not-base64%%%",
            base64.b64encode(b"not json").decode(),
            base64.b64encode(b"[1]").decode(),
        ):
            body = json.dumps({"message": {"data": data, "messageId": data}}).encode()
            assert (await h.post(path, body, headers))[0] == 400, data
        assert h.cluster.annotate_calls == []


def _oidc_receiver(issuer: LocalIssuer, **provider: Any) -> tuple[Receiver, None]:
    spec = {
        "issuerURL": issuer.url,
        "variables": [
            {"name": "owner", "expression": "claims.repository_owner"},
            {"name": "allowedRepos", "expression": "[vars.owner + '/repo-a', vars.owner + '/repo-b']"},
        ],
        "validations": [
            {"expression": "vars.owner == 'my-org'", "message": "wrong org"},
            {"expression": "claims.repository in vars.allowedRepos", "message": "repo not in allowlist"},
        ],
    }
    spec.update(provider)
    receiver, secret = make_receiver("generic-oidc", name="ci-receiver", oidc_providers=[spec])
    assert secret is None
    return receiver, None


def _ci_claims(now: datetime, issuer: LocalIssuer, **overrides: Any) -> dict[str, Any]:
    base = {
        "iss": issuer.url,
        "aud": ["notification-controller", "other"],
        "repository_owner": "my-org",
        "repository": "my-org/repo-a",
        "ref": "refs/heads/main",
    }
    base.update(overrides)
    return token_claims(now, **base)


async def test_generic_oidc_variables_validations_and_claims_filter(issuer: LocalIssuer) -> None:
    """reference §5.6 and the Flux doc example; claims reach the resource filter as ``claims``."""
    receiver, _ = _oidc_receiver(issuer)
    receiver = receiver.model_copy(
        update={
            "spec": receiver.spec.model_copy(update={"resource_filter": "claims.ref == 'refs/heads/main'"})
        }
    )
    h, path = await serve(receiver, None)
    async with h:
        token = issuer.mint(_ci_claims(h.clock.now(), issuer))
        assert (
            await h.post(
                path, b"{}", {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            )
        )[0] == 200
        other_ref = issuer.mint(_ci_claims(h.clock.now(), issuer, ref="refs/heads/dev"))
        assert (await h.post(path, b"{}", {"Authorization": f"Bearer {other_ref}"}))[0] == 200, (
            "filtered out, not an error"
        )
        assert len(h.cluster.annotate_calls) == 1
        assert issuer.requests.count("/.well-known/openid-configuration") == 1


@pytest.mark.parametrize(
    ("case", "claims", "message"),
    [
        (
            "wrong org",
            {"repository_owner": "evil", "repository": "evil/repo-a"},
            "token validation failed: wrong org",
        ),
        (
            "both fail",
            {"repository_owner": "evil"},
            "token validation failed: wrong org; repo not in allowlist",
        ),
        ("wrong aud", {"aud": "someone-else"}, "failed to verify OIDC token: oidc: expected audience"),
        ("expired", {"exp": 1}, "failed to verify OIDC token: oidc: token is expired"),
        (
            "unknown issuer",
            {"iss": "https://token.actions.githubusercontent.com"},
            "no oidcProvider configured for issuer",
        ),
        ("no iss", {"iss": None}, "failed to parse bearer token: token is missing the 'iss' claim"),
        ("variable fails", {"repository_owner": None}, "failed to evaluate variable 'owner'"),
    ],
)
async def test_generic_oidc_refusals(
    issuer: LocalIssuer, case: str, claims: dict[str, Any], message: str
) -> None:
    """reference §5.6 messages, at the verifier level (the HTTP answer is an empty 400)."""
    receiver, _ = _oidc_receiver(issuer)
    clock = ManualClock()
    client = OIDCClient(clock)
    try:
        token = issuer.mint(_ci_claims(clock.now(), issuer, **claims))
        req = HookRequest(
            "POST", "/hook/x", RawHeaders([(b"Authorization", f"Bearer {token}".encode())]), b"{}"
        )
        with pytest.raises(VerificationError) as info:
            await registry.verify(req, VerifyContext(receiver, None, clock, oidc=client))
        assert str(info.value).startswith(message), str(info.value)
    finally:
        await client.close()


async def test_generic_oidc_alg_none_and_foreign_key_refused(issuer: LocalIssuer) -> None:
    """An unsigned token, a token signed by an unpublished key and a discovery issuer mismatch are refused."""
    receiver, _ = _oidc_receiver(issuer)
    h, path = await serve(receiver, None)
    async with h:
        claims = _ci_claims(h.clock.now(), issuer)
        for token in (unsigned_token(claims), issuer.mint(claims, key=issuer.other), _hs256(claims)):
            assert (await h.post(path, b"{}", {"Authorization": f"Bearer {token}"}))[0] == 400
        assert h.cluster.annotate_calls == []

    async with LocalIssuer(issuer_override="https://somewhere-else.example.com") as liar:
        receiver, _ = _oidc_receiver(liar)
        h, path = await serve(receiver, None)
        async with h:
            token = liar.mint(_ci_claims(h.clock.now(), liar))
            assert (await h.post(path, b"{}", {"Authorization": f"Bearer {token}"}))[0] == 400
            assert h.cluster.annotate_calls == []


async def test_cel_filters_see_the_github_payload() -> None:
    """reference §5.5: github exposes the ``payload`` as ``req``; the Flux doc per-resource filter example."""
    resources = [
        {
            "apiVersion": GIT,
            "kind": "GitRepository",
            "name": "*",
            "matchLabels": {"team": "a"},
            "filter": "res.metadata.labels['environment'] == 'production'",
        },
    ]
    receiver, secret = make_receiver(
        "github", resources=resources, resource_filter="req.ref == 'refs/heads/main'"
    )
    h = Harness()
    path = h.add(receiver, secret)
    h.cluster.add(GIT, "GitRepository", "default", "prod", labels={"team": "a", "environment": "production"})
    h.cluster.add(GIT, "GitRepository", "default", "stage", labels={"team": "a", "environment": "staging"})
    async with h:
        assert (await h.post(path, PUSH, _gh(PUSH)))[0] == 200
        assert h.cluster.annotated() == [("GitRepository", "default", "prod")]
        dev = PUSH.replace(b"refs/heads/main", b"refs/heads/dev")
        assert (await h.post(path, dev, _gh(dev, delivery="d-2")))[0] == 200
        assert h.cluster.annotated() == [("GitRepository", "default", "prod")]

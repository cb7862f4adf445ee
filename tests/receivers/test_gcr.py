"""The gcr (Pub/Sub push with Google's ID token) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from notification_controller.api.receiver import Receiver
from notification_controller.receivers.base import GCRSettings
from notification_controller.server.receivers import (
    ReceiverServerSettings,
)
from tests.receivers.case import (
    Env,
    ReceiverCase,
    Request,
    token_forgeries,
)
from tests.receivers.support import hs256_token, serve
from tests.support.receiver_kit import (
    GCR_AUDIENCE,
    GCR_EMAIL,
    GOOGLE_ISSUER,
    IMAGE,
    Harness,
    LocalIssuer,
    make_receiver,
    pubsub_body,
    token_claims,
    unsigned_token,
)

# ---- conformance case ----------------------------------------------------------------------------


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


CASE = ReceiverCase(
    "gcr",
    _gcr,
    token_forgeries(_gcr),
    bad_payload=lambda env: (_gcr(env)[0], b'{"message":{"data":42}}'),
    secret_data={"email": GCR_EMAIL, "audience": GCR_AUDIENCE},
    settings=lambda env: {"gcr": GCRSettings(jwks_url=env.issuer.jwks_url)},
)


# ---- the verifier --------------------------------------------------------------------------------


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
        lambda h, i: "Bearer " + hs256_token(_gcr_claims(h)),
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

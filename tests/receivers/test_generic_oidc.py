"""The generic-oidc (an OIDC ID token, CEL variables and validations) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from notification_controller.api.receiver import Receiver
from notification_controller.errors import VerificationError
from notification_controller.lib.clock import ManualClock
from notification_controller.receivers import registry
from notification_controller.receivers.base import HookRequest, RawHeaders, VerifyContext
from notification_controller.receivers.oidc import OIDCClient
from tests.receivers.case import (
    GENERIC_BODY,
    Env,
    ReceiverCase,
    Request,
    token_forgeries,
)
from tests.receivers.support import hs256_token, serve
from tests.support.receiver_kit import (
    LocalIssuer,
    make_receiver,
    token_claims,
    unsigned_token,
)

# ---- conformance case ----------------------------------------------------------------------------


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


CASE = ReceiverCase("generic-oidc", _oidc, token_forgeries(_oidc), oidc_providers=_oidc_providers)


# ---- the verifier --------------------------------------------------------------------------------


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
        for token in (unsigned_token(claims), issuer.mint(claims, key=issuer.other), hs256_token(claims)):
            assert (await h.post(path, b"{}", {"Authorization": f"Bearer {token}"}))[0] == 400
        assert h.cluster.annotate_calls == []

    async with LocalIssuer(issuer_override="https://somewhere-else.example.com") as liar:
        receiver, _ = _oidc_receiver(liar)
        h, path = await serve(receiver, None)
        async with h:
            token = liar.mint(_ci_claims(h.clock.now(), liar))
            assert (await h.post(path, b"{}", {"Authorization": f"Bearer {token}"}))[0] == 400
            assert h.cluster.annotate_calls == []

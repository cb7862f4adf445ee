"""The generic-hmac (X-Signature HMAC) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import pytest

from notification_controller.errors import VerificationError
from notification_controller.lib.clock import ManualClock
from notification_controller.receivers import registry
from notification_controller.receivers.base import HookRequest, RawHeaders, VerifyContext
from tests.receivers.case import (
    GENERIC_BODY,
    Env,
    ReceiverCase,
    Request,
    signature_forgeries,
)
from tests.support.receiver_kit import TOKEN, github_signature, make_receiver

# ---- conformance case ----------------------------------------------------------------------------


def _generic_hmac(env: Env) -> Request:
    return {
        "Content-Type": "application/json",
        "X-Signature": github_signature(env.token.encode(), GENERIC_BODY),
    }, GENERIC_BODY


CASE = ReceiverCase("generic-hmac", _generic_hmac, signature_forgeries(_generic_hmac, "X-Signature"))


# ---- the verifier --------------------------------------------------------------------------------


def _request(signature: bytes | None) -> HookRequest:
    headers = [] if signature is None else [(b"X-Signature", signature)]
    return HookRequest("POST", "/hook/x", RawHeaders(headers), GENERIC_BODY)


@pytest.mark.parametrize("algo", ["sha1", "sha256", "sha512"])
async def test_each_hash_go_github_accepts(algo: str) -> None:
    receiver, secret = make_receiver("generic-hmac")
    req = _request(github_signature(TOKEN.encode(), GENERIC_BODY, algo).encode())
    verified = await registry.verify(req, VerifyContext(receiver, secret, ManualClock()))
    assert verified.body == GENERIC_BODY


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        (None, "missing signature"),
        (b"sha256", "error parsing signature"),
        (b"md5=" + b"0" * 32, "unknown hash type prefix"),
        (b"sha256=zz", "error decoding signature"),
        (b"sha256=" + b"0" * 64, "payload signature check failed"),
    ],
)
async def test_go_githubs_messages(signature: bytes | None, message: str) -> None:
    """go-github's ``ValidateSignature`` wording, wrapped as Flux wraps it."""
    receiver, secret = make_receiver("generic-hmac")
    with pytest.raises(VerificationError, match=f"^unable to validate HMAC signature: {message}"):
        await registry.verify(_request(signature), VerifyContext(receiver, secret, ManualClock()))

"""``gcr`` (Google Container/Artifact Registry via Pub/Sub push): a Google-signed OIDC token + the payload.

Reference §5.3 and CVE-2026-40109. The Secret must carry non-empty ``email`` and ``audience`` besides
``token``. ``Authorization: Bearer <ID token>`` is verified against Google's key set: signature (RS256/ES256),
``exp``, ``aud == audience``, ``iss`` ∈ {``accounts.google.com``, ``https://accounts.google.com``}, and the
token must belong to the configured service account: ``email == email`` and ``email_verified == true``
(without this binding, any Google account could mint a valid token for the audience).

The key-set URL and the accepted issuers are injectable (``base.GCRSettings``: Google's by default) so tests
use a local issuer with its own keys. The body is a Pub/Sub push envelope; ``message.data`` (standard base64,
decoding errors ignored as Flux does) must be JSON ``{"action","digest","tag"}``, and CEL filters see that
unwrapped object re-encoded in Go's field order.
"""

from __future__ import annotations

import base64
import binascii

from ..errors import VerificationError
from ..lib.gojson import GoStruct, dumps
from .base import HookRequest, JSONShapeError, Verified, VerifyContext, decode_struct
from .oidc import OIDCError, bearer_token

ALGORITHMS = frozenset({"RS256", "ES256"})
ENVELOPE = {
    "message": {"data": "string", "messageId": "string", "publishTime": "string", "subscription": "string"}
}
DATA = {"action": "string", "digest": "string", "tag": "string"}


def _required(ctx: VerifyContext, key: str) -> str:
    value = ctx.secret_field(key)
    text = value.decode("utf-8", errors="replace") if value else ""
    if not text:
        raise VerificationError(f"invalid secret data: required field '{key}' for GCR receiver")
    return text


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    email = _required(ctx, "email")
    audience = _required(ctx, "audience")
    try:
        token = bearer_token(req.headers.single("Authorization"))
        if ctx.oidc is None:
            raise OIDCError("no OIDC client configured")
        claims = await ctx.oidc.verify(
            token,
            jwks_url=ctx.gcr.jwks_url,
            algorithms=ALGORITHMS,
            issuers=ctx.gcr.issuers,
            audience=audience,
            now=ctx.clock.now(),
        )
    except OIDCError as exc:
        raise VerificationError(f"cannot authenticate GCR request: {exc}") from None
    if claims.get("email") != email:
        raise VerificationError(
            "cannot authenticate GCR request: the token email does not match the receiver email"
        )
    if claims.get("email_verified") is not True:
        raise VerificationError("cannot authenticate GCR request: the token email is not verified")

    try:
        envelope = decode_struct(req.body, ENVELOPE)
    except JSONShapeError as exc:
        raise VerificationError(f"cannot decode GCR webhook payload: {exc}") from None
    raw = _lenient_b64(envelope["message"]["data"])
    try:
        data = decode_struct(raw, DATA)
    except JSONShapeError as exc:
        raise VerificationError(f"cannot decode GCR webhook body: {exc}") from None
    body = dumps(GoStruct(action=data["action"], digest=data["digest"], tag=data["tag"]))
    return Verified(body=body, delivery_id=envelope["message"]["messageId"] or None)


def _lenient_b64(text: str) -> bytes:
    """Go's ``base64.StdEncoding.DecodeString`` with the error ignored: the bytes decoded before the error."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    out = bytearray()
    for start in range(0, len(text) - len(text) % 4, 4):
        try:
            out += base64.b64decode(text[start : start + 4], validate=True)
        except (binascii.Error, ValueError):
            break
    return bytes(out)

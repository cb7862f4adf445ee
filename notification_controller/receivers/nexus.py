"""``nexus``: ``X-Nexus-Webhook-Signature`` = lowercase hex HMAC-SHA1(token, raw body) (reference §5.3).

Compared in constant time on bytes (Flux compares the header string with the lowercase hex digest, so
uppercase hex is refused there too). Then the body must decode into ``{"action":string,"repositoryName":string}``.
"""

from __future__ import annotations

import hashlib
import hmac

from ..errors import VerificationError
from .base import HookRequest, JSONShapeError, Verified, VerifyContext, decode_struct

SIGNATURE_HEADER = "X-Nexus-Webhook-Signature"
SHAPE = {"action": "string", "repositoryName": "string"}


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    signature = req.headers.single(SIGNATURE_HEADER)
    if not signature:
        raise VerificationError("the Nexus signature is missing from header")
    expected = hmac.new(ctx.token, req.body, hashlib.sha1).hexdigest().encode("ascii")
    if not ctx.token or not hmac.compare_digest(signature, expected):
        raise VerificationError("invalid Nexus signature")
    try:
        decode_struct(req.body, SHAPE)
    except JSONShapeError as exc:
        raise VerificationError(f"cannot decode Nexus webhook payload: {exc}") from None
    return Verified(body=req.body)

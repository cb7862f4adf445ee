"""``generic-hmac``: ``X-Signature: <algo>=<hex HMAC(token, raw body)>`` (reference §5.3).

Same rules as go-github's ``ValidateSignature`` (``signatures.validate_signature``): ``sha1``/``sha256``/
``sha512``; messages ``missing signature``, ``error parsing signature``, ``unknown hash type prefix``,
``error decoding signature``, ``payload signature check failed``, wrapped ``unable to validate HMAC
signature: ...``. Our own ``generic-hmac`` provider signs with ``sha256`` over the exact bytes it sends.
"""

from __future__ import annotations

from ..errors import VerificationError
from .base import HookRequest, Verified, VerifyContext
from .signatures import SignatureError, validate_signature

SIGNATURE_HEADER = "X-Signature"


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    try:
        if not ctx.token:
            raise SignatureError("the receiver token is empty")
        validate_signature(req.headers.single(SIGNATURE_HEADER), req.body, ctx.hmac_key)
    except SignatureError as exc:
        raise VerificationError(f"unable to validate HMAC signature: {exc}") from None
    return Verified(body=req.body)

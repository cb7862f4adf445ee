"""``harbor``: the ``Authorization`` header must equal the receiver token exactly (reference §5.3).

No scheme is added or stripped (Harbor sends the "Auth Header" value configured on the webhook verbatim).
Compared in constant time on the raw bytes; the body is passed through untouched.
"""

from __future__ import annotations

from ..errors import VerificationError
from .base import HookRequest, Verified, VerifyContext, tokens_equal


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    if not tokens_equal(req.headers.single("Authorization"), ctx.token):
        raise VerificationError("the Harbor Authorization header value does not match the receiver token")
    return Verified(body=req.body)

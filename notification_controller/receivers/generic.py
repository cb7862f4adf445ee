"""``generic``: no authentication beyond the secret webhook path (reference §5.3).

The Secret must still exist with a ``token`` (checked before dispatch); the body is passed through untouched.
"""

from __future__ import annotations

from .base import HookRequest, Verified, VerifyContext


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    return Verified(body=req.body)

"""``quay``: no authentication (the path is the secret); the body must be a Quay repository-push payload.

Shape ``{"docker_url":string,"updated_tags":[string]}`` (reference §5.3).
"""

from __future__ import annotations

from ..errors import VerificationError
from .base import HookRequest, JSONShapeError, Verified, VerifyContext, decode_struct

SHAPE = {"docker_url": "string", "updated_tags": "[]string"}


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    try:
        decode_struct(req.body, SHAPE)
    except JSONShapeError as exc:
        raise VerificationError(f"cannot decode Quay webhook payload: {exc}") from None
    return Verified(body=req.body)

"""``acr``: no authentication (the path is the secret); the body must be an Azure Container Registry push.

Shape ``{"action":string,"target":{"repository":string,"tag":string}}`` (reference §5.3).
"""

from __future__ import annotations

from ..errors import VerificationError
from .base import HookRequest, JSONShapeError, Verified, VerifyContext, decode_struct

SHAPE = {"action": "string", "target": {"repository": "string", "tag": "string"}}


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    try:
        decode_struct(req.body, SHAPE)
    except JSONShapeError as exc:
        raise VerificationError(f"cannot decode ACR webhook payload: {exc}") from None
    return Verified(body=req.body)

"""``dockerhub``: no authentication (the path is the secret); the body must be a DockerHub push payload.

Flux decodes it into ``{"push_data":{"tag":string},"repository":{"repo_url":string}}`` and rejects any
type mismatch with ``cannot decode DockerHub webhook payload`` (reference §5.3).
"""

from __future__ import annotations

from ..errors import VerificationError
from .base import HookRequest, JSONShapeError, Verified, VerifyContext, decode_struct

SHAPE = {"push_data": {"tag": "string"}, "repository": {"repo_url": "string"}}


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    try:
        decode_struct(req.body, SHAPE)
    except JSONShapeError:
        raise VerificationError("cannot decode DockerHub webhook payload") from None
    return Verified(body=req.body)

"""``gitlab``: ``X-Gitlab-Token`` must equal the receiver token (reference §5.3).

Compared in constant time on bytes with the RAW Secret value (pinned, checklist A10: not trimmed, as Flux;
a Secret value ending in a newline never matches, since a header cannot carry one). The event filter uses
``X-Gitlab-Event`` (e.g. ``Push Hook``); ``X-Gitlab-Event-UUID`` is the delivery id for replay protection.
GitLab's newer signing-token scheme (Standard Webhooks) is not implemented, as in Flux.
"""

from __future__ import annotations

from ..errors import VerificationError
from .base import HookRequest, Verified, VerifyContext, require_event, tokens_equal

TOKEN_HEADER = "X-Gitlab-Token"
EVENT_HEADER = "X-Gitlab-Event"
DELIVERY_HEADER = "X-Gitlab-Event-UUID"


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    if not tokens_equal(req.headers.single(TOKEN_HEADER), ctx.token):
        raise VerificationError("the X-Gitlab-Token header value does not match the receiver token")
    event = req.headers.text(EVENT_HEADER)
    require_event(event, ctx, "the GitLab event {} is not authorised")
    return Verified(body=req.body, event=event, delivery_id=req.headers.text(DELIVERY_HEADER) or None)

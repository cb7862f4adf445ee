"""``bitbucket`` (Bitbucket Server / Data Center, and Bitbucket Cloud): GitHub-style HMAC (reference §5.3).

Bitbucket signs with ``X-Hub-Signature: sha256=<hex>`` over the raw body; the rules are go-github's
(``signatures``). The event is ``X-Event-Key`` (e.g. ``repo:refs_changed``, Cloud ``repo:push``);
``diagnostics:ping`` (the "Test connection" button) is answered 200 without triggering anything (pinned).
The delivery id used for replay protection is ``X-Request-UUID`` (Bitbucket Cloud) or ``X-Request-Id``
(Bitbucket Server / Data Center).
"""

from __future__ import annotations

from .base import HookRequest, Verified, VerifyContext, require_event
from .signatures import check_payload

EVENT_HEADER = "X-Event-Key"
DELIVERY_HEADERS = ("X-Request-UUID", "X-Request-Id")
PING = "diagnostics:ping"


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    payload = check_payload(req, ctx.hmac_key, "the Bitbucket server signature header is invalid")
    event = req.headers.text(EVENT_HEADER)
    delivery = next((d for d in (req.headers.text(h) for h in DELIVERY_HEADERS) if d), None)
    if event == PING:
        return Verified(body=payload, event=event, ping=True, delivery_id=delivery)
    require_event(event, ctx, "the Bitbucket server event {} is not authorised")
    return Verified(body=payload, event=event, delivery_id=delivery)

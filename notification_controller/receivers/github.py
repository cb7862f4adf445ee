"""``github``: go-github ``ValidatePayload`` + the ``X-GitHub-Event`` filter (reference §5.3).

* Signature: ``X-Hub-Signature-256`` (sha256 only), or the legacy ``X-Hub-Signature`` when the former is absent
  (GitHub Enterprise Server < 3.x sends only SHA-1); see ``signatures`` for the pinned rules.
* ``Content-Type``: ``application/json`` or ``application/x-www-form-urlencoded`` (payload = form field
  ``payload``); CEL filters see the payload as ``req`` (parsed only when the request's Content-Type is JSON,
  as Flux does).
* ``ping`` (sent when a hook is created) is answered 200 without triggering anything, whether or not it is
  listed in ``spec.events`` (pinned; Flux triggered a reconcile when listed and answered 400 otherwise).
* ``X-GitHub-Delivery`` is the delivery id used for replay protection.
"""

from __future__ import annotations

from .base import HookRequest, Verified, VerifyContext, require_event
from .signatures import check_payload

EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
PING = "ping"


async def verify(req: HookRequest, ctx: VerifyContext) -> Verified:
    payload = check_payload(req, ctx.hmac_key, "the GitHub signature header is invalid")
    event = req.headers.text(EVENT_HEADER)
    delivery = req.headers.text(DELIVERY_HEADER) or None
    if event == PING:
        return Verified(body=payload, event=event, ping=True, delivery_id=delivery)
    require_event(event, ctx, "the GitHub event {} is not authorised")
    return Verified(body=payload, event=event, delivery_id=delivery)

"""The nexus (X-Nexus-Webhook-Signature, HMAC-SHA1) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

import hashlib
import hmac
import json

from tests.receivers.case import (
    Env,
    ReceiverCase,
    Request,
    signature_forgeries,
)
from tests.receivers.support import serve
from tests.support.receiver_kit import (
    TOKEN,
    make_receiver,
)

# ---- conformance case ----------------------------------------------------------------------------


NEXUS_BODY = json.dumps(
    {
        "timestamp": "2026-01-01T00:00:00.000+0000",
        "nodeId": "node",
        "initiator": "admin/127.0.0.1",
        "repositoryName": "docker-hosted",
        "action": "CREATED",
    }
).encode()


def _nexus(env: Env) -> Request:
    sig = hmac.new(env.token.encode(), NEXUS_BODY, hashlib.sha1).hexdigest()
    return {"Content-Type": "application/json", "X-Nexus-Webhook-Signature": sig}, NEXUS_BODY


CASE = ReceiverCase(
    "nexus",
    _nexus,
    signature_forgeries(_nexus, "X-Nexus-Webhook-Signature"),
    bad_payload=None,
)


# ---- the verifier --------------------------------------------------------------------------------


async def test_nexus_hmac_sha1() -> None:
    """Checklist A14: valid / invalid / missing ``X-Nexus-Webhook-Signature`` (lowercase hex HMAC-SHA1)."""
    receiver, secret = make_receiver("nexus")
    h, path = await serve(receiver, secret)
    sig = hmac.new(TOKEN.encode(), NEXUS_BODY, hashlib.sha1).hexdigest()
    async with h:
        assert (await h.post(path, NEXUS_BODY, {"X-Nexus-Webhook-Signature": sig}))[0] == 200
        assert (await h.post(path, NEXUS_BODY, {"X-Nexus-Webhook-Signature": sig.upper()}))[0] == 400
        assert (await h.post(path, NEXUS_BODY, {"X-Nexus-Webhook-Signature": "0" * 40}))[0] == 400
        assert (await h.post(path, NEXUS_BODY, {}))[0] == 400
        not_json = b"not json"
        signed = hmac.new(TOKEN.encode(), not_json, hashlib.sha1).hexdigest()
        assert (await h.post(path, not_json, {"X-Nexus-Webhook-Signature": signed}))[0] == 400
        assert len(h.cluster.annotate_calls) == 1

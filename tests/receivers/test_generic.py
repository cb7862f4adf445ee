"""The generic (no authentication: the secret path only) receiver: its conformance case and the tests of its verifier (reference §5.3)."""

from __future__ import annotations

from notification_controller.lib.clock import ManualClock
from notification_controller.receivers import registry
from notification_controller.receivers.base import HookRequest, RawHeaders, VerifyContext
from tests.receivers.case import (
    GENERIC_BODY,
    ReceiverCase,
    plain,
)
from tests.support.receiver_kit import make_receiver

# ---- conformance case ----------------------------------------------------------------------------


CASE = ReceiverCase("generic", plain(GENERIC_BODY))


# ---- the verifier --------------------------------------------------------------------------------


async def test_the_body_passes_through_untouched_whatever_the_headers() -> None:
    """reference §5.3 generic: no check beyond the secret path (and the Secret, checked before the verifier)."""
    receiver, secret = make_receiver("generic")
    body = b'{"any": "thing", "n": 1e400}'
    for headers in ([], [(b"X-Signature", b"sha256=00")], [(b"Authorization", b"Bearer nope")]):
        req = HookRequest("POST", "/hook/x", RawHeaders(headers), body)
        verified = await registry.verify(req, VerifyContext(receiver, secret, ManualClock()))
        assert verified.body == body

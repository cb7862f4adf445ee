"""Rocket.Chat (Slack-compatible incoming webhook): its conformance case and the pure tests of its request
builder.

``CASES`` is run by the conformance kit (``tests/conformance/test_provider_conformance.py``) against a real
local server; its ``expect`` checks the request against the reference, the expected bytes written out by
hand. The tests below call the builder directly, without a network.
"""

from __future__ import annotations

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.slack import RocketNotifier
from tests.providers.case import ProviderCase
from tests.providers.support import INVALID_ADDRESSES, assert_json_post, construction_error, one, slack_body
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_rocket(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert_json_post(req, "/hooks/ROCKETSECRET/abc", slack_body("#ops", "fluxbot", "", "#0076D7"))


CASES: list[ProviderCase] = [
    ProviderCase(
        type="rocket",
        spec={"channel": "#ops", "username": "fluxbot"},
        secret={"address": "{url}/hooks/ROCKETSECRET/abc"},
        expect=expect_rocket,
        canaries=["{url}/hooks/ROCKETSECRET/abc"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize("address", INVALID_ADDRESSES)
def test_invalid_address_is_rejected_without_echoing_it(address: str) -> None:
    """Reference §4.0: URLs are validated at construction; checklist E9: credentials are not echoed."""
    message = construction_error(RocketNotifier, ProviderType.ROCKET, address=address)
    assert message.startswith("invalid Rocket hook URL")
    assert "s3cretpw" not in message

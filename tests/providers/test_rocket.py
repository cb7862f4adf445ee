"""Rocket.Chat (Slack-compatible incoming webhook): its conformance case and the pure tests of its request
builder.
"""

from __future__ import annotations

from tests.providers.case import ProviderCase
from tests.providers.support import assert_json_post, one, slack_body
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

"""Discord (its Slack-compatible ``/slack`` webhook): its conformance case and the pure tests of its request
builder.
"""

from __future__ import annotations

import json

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.slack import DiscordNotifier, RocketNotifier, discord_url
from tests.providers.case import ProviderCase
from tests.providers.support import (
    assert_json_post,
    event,
    one,
    opts,
    slack_body,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_discord(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert "Authorization" not in req.headers
    assert_json_post(req, "/api/webhooks/123/DISCORDSECRET/slack", slack_body("", "flux-bot", "", "good"))


CASES: list[ProviderCase] = [
    ProviderCase(
        type="discord",
        spec={"username": "flux-bot", "channel": "ignored"},
        secret={"address": "{url}/api/webhooks/123/DISCORDSECRET"},
        expect=expect_discord,
        canaries=["{url}/api/webhooks/123/DISCORDSECRET"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("https://discord.com/api/webhooks/1/abc", "https://discord.com/api/webhooks/1/abc/slack"),
        ("https://discord.com/api/webhooks/1/abc/", "https://discord.com/api/webhooks/1/abc/slack"),
        ("https://discord.com/api/webhooks/1/abc/slack", "https://discord.com/api/webhooks/1/abc/slack"),
        (
            "https://discord.com/api/webhooks/1/abc?wait=true",
            "https://discord.com/api/webhooks/1/abc/slack?wait=true",
        ),
        ("https://discord.com", "https://discord.com/slack"),
        ("https://discord.com/a//b/../c", "https://discord.com/a/c/slack"),
    ],
)
def test_discord_url_gets_slack_suffix(address: str, expected: str) -> None:
    """Reference §4.1: ``path.Join(path, "slack")`` unless the URL already ends with ``/slack``."""
    assert discord_url(address) == expected
    n = DiscordNotifier(opts(ProviderType.DISCORD, address=address))
    assert n.build_request(event()).url == expected


def test_discord_and_rocket_payloads() -> None:
    d = DiscordNotifier(opts(ProviderType.DISCORD, address="https://d.test/h", channel="x"))
    body = json.loads(d.build_request(event(metadata={})).body)
    assert body["channel"] == ""
    assert body["username"] == "kustomize-controller"
    assert body["attachments"][0]["fallback"] == ""
    assert body["attachments"][0]["color"] == "danger"
    r = RocketNotifier(opts(ProviderType.ROCKET, address="https://r.test/h", channel="#c"))
    body = json.loads(r.build_request(event(metadata={})).body)
    assert (body["channel"], body["username"]) == ("#c", "")
    assert body["attachments"][0]["color"] == "#FF0000"
    info = json.loads(r.build_request(event(severity="info")).body)
    assert info["attachments"][0]["color"] == "#0076D7"

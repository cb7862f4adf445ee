"""Discord (its Slack-compatible ``/slack`` webhook): its conformance case and the pure tests of its request
builder.
"""

from __future__ import annotations

import json

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.message import Edit, Message
from notification_controller.providers.slack import (
    DiscordNotifier,
    RocketNotifier,
    discord_message_url,
    discord_url,
    posted_discord_id,
    with_query,
)
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


# ---- editing a message (resolveInPlace, issue 26) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("https://discord.com/api/webhooks/1/abc", "https://discord.com/api/webhooks/1/abc/messages/42"),
        ("https://discord.com/api/webhooks/1/abc/", "https://discord.com/api/webhooks/1/abc/messages/42"),
        (
            "https://discord.com/api/webhooks/1/abc/slack",
            "https://discord.com/api/webhooks/1/abc/messages/42",
        ),
        (
            "https://discord.com/api/webhooks/1/abc?thread_id=7&wait=false",
            "https://discord.com/api/webhooks/1/abc/messages/42?thread_id=7",
        ),
    ],
)
def test_the_edit_goes_to_the_webhooks_own_messages_path(address: str, expected: str) -> None:
    assert discord_message_url(address, "42") == expected
    n = DiscordNotifier(opts(ProviderType.DISCORD, address=address))
    assert n.build_request(event(), wait=True).url == with_query(discord_url(address), wait="true")
    assert n.build_request(event()).url == discord_url(address)  # without the option: Flux's URL


@pytest.mark.parametrize("message_id", ["../../1/other", "42/../../x", "", "4" * 21, "42?x=1", "4 2"])
def test_only_a_snowflake_becomes_a_path_segment(message_id: str) -> None:
    with pytest.raises(ValueError, match="digits"):
        discord_message_url("https://discord.com/api/webhooks/1/abc", message_id)
    assert posted_discord_id(json.dumps({"id": message_id}).encode()) == ""
    assert posted_discord_id(b'{"id": 42}') == "" and posted_discord_id(b"[" * 60_000) == ""


def test_the_webhook_path_is_masked_without_its_slack_suffix() -> None:
    n = DiscordNotifier(
        opts(ProviderType.DISCORD, address="https://discord.com/api/webhooks/1/SECRETTOKEN/slack")
    )
    assert "api/webhooks/1/SECRETTOKEN" in n.masks()


def test_the_edit_is_cut_to_discords_limits() -> None:
    n = DiscordNotifier(opts(ProviderType.DISCORD, address="https://discord.com/api/webhooks/1/abc"))
    big = Message("t" * 1000, "d" * 10_000, "info", tuple((f"k{i}", "v" * 5000) for i in range(40)))
    request = n.build_edit(event(), big, Edit("key", target="42", after="12m"))
    assert request.method == "PATCH"
    (embed,) = json.loads(request.body)["embeds"]
    assert len(embed["title"]) == 256 and len(embed["description"]) == 4096
    assert len(embed["fields"]) == 25 and all(len(f["value"]) <= 1024 for f in embed["fields"])
    assert embed["fields"][:2] == [
        {"inline": True, "name": "state", "value": "resolved"},
        {"inline": True, "name": "recovered after", "value": "12m"},
    ]

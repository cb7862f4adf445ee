"""Mattermost (beyond Flux: its own incoming-webhook payload, not Slack's): its conformance case and the
pure tests of its request builder."""

from __future__ import annotations

import json
from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.outbound import masked
from notification_controller.providers.mattermost import MattermostNotifier, card
from notification_controller.providers.message import Message
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    FIRST_LINE,
    MSG,
    SAMPLE_OBJ,
    SUMMARY,
    assert_json_post,
    construction_error,
    event,
    go,
    one,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------

HOOK = "hooks/xmattermostcanary0123456y"  # Mattermost's webhook ids: 26 characters [a-z0-9]

SAMPLE_CARD = (
    "| | |\n|:--|:--|\n"
    "| object | GitRepository/webapp |\n"
    "| namespace | gitops-system |\n"
    "| reason | ReconciliationSucceeded |\n"
    "| severity | info |\n"
    "| reported by | source-controller |\n"
    "| time | 2026-03-01T10:20:30Z |"
)


def expect_mattermost(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    body = {
        "channel": "town-square",
        "username": "flux",
        "icon_url": "https://example.com/flux.png",
        "attachments": [
            {
                "fallback": f"{SAMPLE_OBJ}: {FIRST_LINE}",
                "color": "#2EB886",
                "author_name": SAMPLE_OBJ,
                "text": MSG,
                "fields": [
                    {"title": "revision", "value": SAMPLE_REVISION, "short": False},
                    {"title": "summary", "value": SUMMARY, "short": True},
                ],
            }
        ],
        "props": {"card": SAMPLE_CARD},
    }
    assert_json_post(req, "/" + HOOK, body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="mattermost",
        spec={"channel": "town-square", "username": "flux"},
        secret={"address": "{url}/" + HOOK, "icon_url": "https://example.com/flux.png"},
        expect=expect_mattermost,
        canaries=["{url}/" + HOOK],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "invalid Mattermost webhook URL: empty"),
        (
            {
                "address": "https://mm.example.com/hooks/x",
                "secret_data": {"icon_url": b"javascript:alert(1)"},
            },
            "invalid Mattermost icon_url",
        ),
    ],
)
def test_bad_settings_name_the_field(kw: dict[str, Any], message: str) -> None:
    assert construction_error(MattermostNotifier, ProviderType.MATTERMOST, **kw).startswith(message)


def test_minimal_payload_leaves_the_webhooks_own_channel_and_icon() -> None:
    n = MattermostNotifier(opts(ProviderType.MATTERMOST, address="https://mm.example.com/hooks/abc"))
    body = json.loads(n.build_request(event(metadata={})).body)
    assert list(body) == ["username", "attachments", "props"]  # no channel, no icon_url: the webhook's own
    assert body["username"] == "kustomize-controller"
    assert body["attachments"][0]["color"] == "#D24B4E"  # an error: red
    assert "fields" not in body["attachments"][0]
    assert "text" not in body  # Mattermost takes attachments alone; the fallback is the push text


def test_not_slacks_payload() -> None:
    """What makes it its own type: none of Slack's fields that Mattermost ignores."""
    n = MattermostNotifier(opts(ProviderType.MATTERMOST, address="https://mm.example.com/hooks/abc"))
    raw = n.build_request(event()).body.decode()
    assert "icon_emoji" not in raw and "mrkdwn_in" not in raw and '"props"' in raw


def test_a_template_message_is_what_is_sent_and_the_card_keeps_the_event() -> None:
    n = MattermostNotifier(opts(ProviderType.MATTERMOST, address="https://mm.example.com/hooks/abc"))
    message = Message("Failed: apps", "line one\nline two", "trace", (("k", "v" * 41),))
    body = n.build_request(event(), message).body
    assert body == go(
        {
            "username": "kustomize-controller",
            "attachments": [
                {
                    "fallback": "Failed: apps: line one",
                    "color": "#A0A0A0",
                    "author_name": "Failed: apps",
                    "text": "line one\nline two",
                    "fields": [{"title": "k", "value": "v" * 41, "short": False}],
                }
            ],
            "props": {"card": card(event())},
        }
    )
    assert "| object | Kustomization/apps |" in card(event())


def test_a_card_cell_cannot_break_the_table() -> None:
    text = card(event(reason="Bad|Reason\nNext"))
    assert "| reason | Bad\\|Reason Next |" in text
    assert "| time |" not in card(event(timestamp=None))


def test_the_webhook_key_is_masked() -> None:
    address = "https://mm.example.com/hooks/xmattermostcanary0123456y"
    n = MattermostNotifier(opts(ProviderType.MATTERMOST, address=address))
    assert "xmattermostcanary0123456y" not in masked(f"POST {address}: 500", n.masks())

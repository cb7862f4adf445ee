"""Slack (incoming webhook, or chat.postMessage with a bot token): its conformance case and the pure tests of
its request builder.
"""

from __future__ import annotations

import json

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.errors import FailureReason, PermanentDeliveryError
from notification_controller.outbound import OutboundResponse
from notification_controller.providers.slack import SlackNotifier
from tests.providers.case import ProviderCase
from tests.providers.support import (
    FIRST_LINE,
    OBJ,
    SAMPLE_OBJ,
    assert_json_post,
    event,
    go,
    one,
    opts,
    slack_body,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_slack(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Bearer xoxb-canary-slack-token"
    body = slack_body("general", "source-controller", f"{SAMPLE_OBJ}: {FIRST_LINE}", "good")
    assert_json_post(req, "/services/T0/B0/SLACKHOOKSECRET", body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="slack",
        spec={"channel": "general"},
        secret={"address": "{url}/services/T0/B0/SLACKHOOKSECRET", "token": "xoxb-canary-slack-token"},
        expect=expect_slack,
        canaries=["xoxb-canary-slack-token", "{url}/services/T0/B0/SLACKHOOKSECRET"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


def test_slack_error_event_exact_body() -> None:
    n = SlackNotifier(opts(ProviderType.SLACK, address="https://hooks.slack.com/services/X", channel="ops"))
    req = n.build_request(event(message="first line\nsecond"))
    assert req.method == "POST"
    assert req.url == "https://hooks.slack.com/services/X"
    assert "Authorization" not in req.headers
    assert req.body == go(
        {
            "channel": "ops",
            "username": "kustomize-controller",
            "icon_url": "",
            "icon_emoji": "",
            "attachments": [
                {
                    "fallback": f"{OBJ}: first line",
                    "color": "danger",
                    "author_name": OBJ,
                    "text": "first line\nsecond",
                    "mrkdwn_in": ["text"],
                    "fields": [
                        {"title": "env", "value": "prod", "short": False},
                        {"title": "revision", "value": "main@sha1:abc", "short": False},
                    ],
                }
            ],
        }
    )


def test_slack_username_and_token() -> None:
    n = SlackNotifier(opts(ProviderType.SLACK, address="https://x.test/h", username="bot", token="xoxb-1"))
    req = n.build_request(event(severity="info", metadata={}))
    body = json.loads(req.body)
    assert body["username"] == "bot"
    assert body["attachments"][0]["color"] == "good"
    assert body["attachments"][0]["fields"] == []
    assert req.headers["Authorization"] == "Bearer xoxb-1"


def test_slack_web_api_response_is_validated() -> None:
    """Reference §4.1: on chat.postMessage a 200 with ``ok: false`` is a failure."""
    api = SlackNotifier(opts(ProviderType.SLACK, address="https://slack.com/api/chat.postMessage", token="t"))
    api.check_response(OutboundResponse(200, {}, b'{"ok":true}'))
    with pytest.raises(
        PermanentDeliveryError, match=r"^Slack responded with error: channel_not_found$"
    ) as info:
        api.check_response(OutboundResponse(200, {}, b'{"ok":false,"error":"channel_not_found"}'))
    assert info.value.failure is FailureReason.PROVIDER_ERROR  # a 2xx that says it failed
    with pytest.raises(PermanentDeliveryError, match="unable to unmarshal response body"):
        api.check_response(OutboundResponse(200, {}, b"ok"))
    hook = SlackNotifier(opts(ProviderType.SLACK, address="https://hooks.slack.com/services/X"))
    hook.check_response(OutboundResponse(200, {}, b"ok"))  # webhooks answer plain "ok"

"""Slack (incoming webhook, or chat.postMessage with a bot token): its conformance case and the pure tests of
its request builder.
"""

from __future__ import annotations

import json

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.errors import FailureReason, PermanentDeliveryError
from notification_controller.outbound import OutboundResponse
from notification_controller.providers.slack import SlackNotifier, posted_message, posted_ts, web_api_url
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


# ---- the Web API on any endpoint (issue 26) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "update"),
    [
        ("https://slack.com/api/chat.postMessage", "https://slack.com/api/chat.update"),
        ("https://slack-gov.com/api/chat.postMessage", "https://slack-gov.com/api/chat.update"),
        ("https://proxy.corp/slack/api/chat.postMessage", "https://proxy.corp/slack/api/chat.update"),
        ("https://proxy.corp/chat.postMessage?team=T1", "https://proxy.corp/chat.update?team=T1"),
        ("http://10.0.0.1:8080/chat.postMessage", "http://10.0.0.1:8080/chat.update"),
        ("https://hooks.slack.com/services/T0/B0/XXXX", None),  # incoming webhooks: unchanged
        ("https://slack.com/api/chat.postMessage/", None),
        ("https://slack.com/api/chat.postMessages", None),
        ("https://slack.com/api/chat.postmessage", None),  # method names are case-sensitive
        ("https://proxy.corp/services/chat.postMessage-hook", None),
        ("https://chat.postMessage", None),
        ("http://[::1/chat.postMessage", None),  # not a URL
    ],
)
def test_the_web_api_is_any_address_ending_with_chat_post_message(address: str, update: str | None) -> None:
    assert web_api_url(address, "chat.update") == update
    if address.startswith("http://["):
        return
    n = SlackNotifier(opts(ProviderType.SLACK, address=address, token="xoxb-1"))
    assert (n.web_api, n.threads, n.edits) == (update is not None,) * 3
    if update is None:
        n.check_response(OutboundResponse(200, {}, b"ok"))  # a webhook's plain "ok": never checked
    else:
        with pytest.raises(PermanentDeliveryError, match="Slack responded with error: not_authed"):
            n.check_response(OutboundResponse(200, {}, b'{"ok":false,"error":"not_authed"}'))
    without_token = SlackNotifier(opts(ProviderType.SLACK, address=address))
    assert not without_token.threads and not without_token.edits


def test_hostile_answers_fail_cleanly_and_ids_are_checked() -> None:
    """A deep or huge answer is a ``PermanentDeliveryError``, never a ``RecursionError`` out of the
    notifier; a ``ts`` or channel that is not one is not kept."""
    api = SlackNotifier(opts(ProviderType.SLACK, address="https://slack.com/api/chat.postMessage", token="t"))
    with pytest.raises(PermanentDeliveryError, match="unable to unmarshal") as info:
        api.check_response(OutboundResponse(200, {}, b"[" * 60_000))
    assert info.value.failure is FailureReason.PROVIDER_ERROR
    with pytest.raises(PermanentDeliveryError) as info:
        api.check_response(OutboundResponse(200, {}, b'{"ok":false,"error":"' + b"e" * 50_000 + b'"}'))
    assert len(str(info.value)) < 300
    assert posted_ts(b"[" * 60_000) == "" and posted_message(b"{" * 60_000) == ("", "")
    assert posted_message(b'{"ok":true,"ts":"1700000000.000100","channel":"C0123"}') == (
        "1700000000.000100",
        "C0123",
    )
    for hostile in (
        b'{"ts":1700000000.0001,"channel":"C1"}',
        b'{"ts":"1700000000.000100","channel":{"id":"C1"}}',
        b'{"ts":"' + b"1" * 100 + b'.1","channel":"C1"}',
        b'{"ts":"1700000000.000100\\n","channel":"C1"}',
        b'{"ts":"1.1","channel":"C1\\"}]"}',
    ):
        assert posted_message(hostile) == ("", "")

"""Pushover (beyond Flux: the form-encoded message API): its conformance case and the pure tests of its
request builder."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.api.provider import ProviderType
from notification_controller.errors import PermanentDeliveryError
from notification_controller.outbound import OutboundResponse, masked
from notification_controller.providers.message import Message
from notification_controller.providers.pushover import (
    API_URL,
    MESSAGE_LIMIT,
    PushoverNotifier,
    cut_html,
    validate_pushover_response,
)
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import MSG, SAMPLE_OBJ, SUMMARY, WHEN_UNIX, construction_error, event, one, opts
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------

APP_TOKEN = "azGDORePK8gMaC0QOYAMyEEuzJnyUi"  # Pushover's tokens are 30 characters [A-Za-z0-9]
USER_KEY = "uQiRzpo4DXghDmr9QzzfQu27cmVRsG"


def expect_pushover(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.method == "POST"
    assert req.path == "/1/messages.json"
    assert req.headers["Content-Type"] == "application/x-www-form-urlencoded"
    message = f"{MSG}\n\n<b>revision</b>: {SAMPLE_REVISION}\n<b>summary</b>: {SUMMARY}"
    assert parse_qsl(req.text(), keep_blank_values=True, strict_parsing=True) == [
        ("token", APP_TOKEN),
        ("user", USER_KEY),
        ("message", message),
        ("html", "1"),
        ("priority", "0"),
        ("title", SAMPLE_OBJ),
        ("timestamp", str(WHEN_UNIX)),
    ]


CASES: list[ProviderCase] = [
    ProviderCase(
        type="pushover",
        spec={"address": "{url}/1/messages.json", "channel": USER_KEY},
        secret={"token": APP_TOKEN},
        expect=expect_pushover,
        canaries=[APP_TOKEN, USER_KEY],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"channel": USER_KEY}, "empty Pushover application token (the Secret's 'token')"),
        ({"token": APP_TOKEN}, "empty Pushover user key (spec.channel or the Secret's 'user')"),
        ({"token": APP_TOKEN, "channel": "u", "address": "file:///x"}, "invalid Pushover API URL"),
    ],
)
def test_missing_settings_name_the_field(kw: dict[str, Any], message: str) -> None:
    assert construction_error(PushoverNotifier, ProviderType.PUSHOVER, **kw).startswith(message)


def test_default_api_url_and_the_user_key_from_the_secret() -> None:
    n = PushoverNotifier(
        opts(ProviderType.PUSHOVER, token=APP_TOKEN, secret_data={"user": USER_KEY.encode()})
    )
    req = n.build_request(event())
    assert req.url == API_URL == "https://api.pushover.net/1/messages.json"
    form = dict(parse_qsl(req.body.decode()))
    assert form["user"] == USER_KEY
    assert form["priority"] == "1"  # an error: high
    assert form["timestamp"] == "1767323045"  # 2026-01-02T03:04:05Z


@pytest.mark.parametrize(("severity", "priority"), [("info", "0"), ("error", "1"), ("trace", "-1")])
def test_priority_follows_severity_and_is_never_emergency(severity: str, priority: str) -> None:
    n = PushoverNotifier(opts(ProviderType.PUSHOVER, token=APP_TOKEN, channel=USER_KEY))
    assert dict(parse_qsl(n.build_request(event(severity=severity)).body.decode()))["priority"] == priority


def test_html_is_escaped_and_the_limits_kept() -> None:
    n = PushoverNotifier(opts(ProviderType.PUSHOVER, token=APP_TOKEN, channel=USER_KEY))
    message = Message("t" * 300, "<script>&" + "x" * 2000, "error", (("a<b", "c&d"),))
    form = dict(parse_qsl(n.build_request(event(timestamp=None), message).body.decode()))
    assert form["message"].startswith("&lt;script&gt;&amp;xxx")
    assert len(form["message"]) <= MESSAGE_LIMIT and form["message"].endswith("…")
    assert len(form["title"]) == 250 and form["title"].endswith("…")
    assert "timestamp" not in form
    short = dict(
        parse_qsl(n.build_request(event(), Message("t", "x", "info", (("a<b", "c&d"),))).body.decode())
    )
    assert short["message"] == "x\n\n<b>a&lt;b</b>: c&amp;d"


@given(st.lists(st.sampled_from(["a", "&amp;", "<b>", "</b>", "é", "\n"]), max_size=400), st.integers(2, 300))
def test_a_cut_never_splits_an_entity_or_a_tag(parts: list[str], limit: int) -> None:
    text = "".join(parts)
    out = cut_html(text, limit)
    assert len(out) <= max(limit, len(text))
    body = out.removesuffix("…") if out != text else out
    assert body.count("&") == body.count(";")
    assert body.count("<") == body.count(">")


def test_a_2xx_without_status_1_is_a_provider_error() -> None:
    validate_pushover_response(OutboundResponse(200, {}, b'{"status":1,"request":"x"}'))
    validate_pushover_response(OutboundResponse(200, {}, b"ok"))
    with pytest.raises(PermanentDeliveryError) as info:
        validate_pushover_response(OutboundResponse(200, {}, b'{"status":0,"errors":["x"]}'))
    assert info.value.failure.value == "provider_error"


def test_the_user_key_from_the_channel_is_masked() -> None:
    n = PushoverNotifier(opts(ProviderType.PUSHOVER, token=APP_TOKEN, channel=USER_KEY))
    text = masked(f"user {USER_KEY} token {APP_TOKEN}", n.masks())
    assert USER_KEY not in text and APP_TOKEN not in text

"""Gotify (beyond Flux: ``POST /message`` with ``X-Gotify-Key``): its conformance case and the pure tests of
its request builder."""

from __future__ import annotations

import json
from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.gotify import GotifyNotifier, gotify_url
from notification_controller.providers.message import Message
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
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

APP_TOKEN = "AqK7zV.GOTIFYCANARY"  # Gotify's application tokens: 15 characters from [A-Za-z0-9._-]


def expect_gotify(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["X-Gotify-Key"] == APP_TOKEN
    assert "token" not in req.query  # never in the URL
    body = {
        "title": SAMPLE_OBJ,
        "message": f"{MSG}\n\n- **revision**: {SAMPLE_REVISION}\n- **summary**: {SUMMARY}",
        "priority": 5,
        "extras": {"client::display": {"contentType": "text/markdown"}},
    }
    assert_json_post(req, "/gotify/message", body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="gotify",
        spec={"address": "{url}/gotify/"},
        secret={"token": APP_TOKEN},
        expect=expect_gotify,
        canaries=[APP_TOKEN],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("https://push.example.com", "https://push.example.com/message"),
        ("https://push.example.com/", "https://push.example.com/message"),
        ("https://example.com/gotify?x=1", "https://example.com/gotify/message"),
    ],
)
def test_the_message_endpoint_is_under_the_server_url(address: str, url: str) -> None:
    assert gotify_url(address) == url


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://push.example.com"}, "empty Gotify application token (the Secret's 'token')"),
        ({"token": APP_TOKEN}, "invalid Gotify server URL: empty"),
    ],
)
def test_missing_settings_name_the_field(kw: dict[str, Any], message: str) -> None:
    assert construction_error(GotifyNotifier, ProviderType.GOTIFY, **kw).startswith(message)


@pytest.mark.parametrize(("severity", "priority"), [("info", 5), ("error", 8), ("trace", 2)])
def test_priority_follows_severity(severity: str, priority: int) -> None:
    n = GotifyNotifier(opts(ProviderType.GOTIFY, address="https://push.example.com", token=APP_TOKEN))
    assert json.loads(n.build_request(event(severity=severity)).body)["priority"] == priority


def test_a_template_message_is_what_is_sent() -> None:
    n = GotifyNotifier(opts(ProviderType.GOTIFY, address="https://push.example.com", token=f" {APP_TOKEN}\n"))
    req = n.build_request(event(), Message("Failed: apps", "see **logs**", "error", ()))
    assert req.headers["X-Gotify-Key"] == APP_TOKEN  # a Secret's trailing newline is not sent
    assert req.body == go(
        {
            "title": "Failed: apps",
            "message": "see **logs**",
            "priority": 8,
            "extras": {"client::display": {"contentType": "text/markdown"}},
        }
    )

"""Zoom (incoming webhook, full format): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.zoom import ZoomNotifier, zoom_url
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    MSG,
    OBJ,
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


def expect_zoom(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.query == {"format": "full"}
    assert req.headers["Authorization"] == "zoom-canary-token"
    body = {
        "content": {
            "head": {"text": SAMPLE_OBJ, "sub_head": {"text": "info"}},
            "body": [
                {"type": "message", "text": MSG},
                {
                    "type": "fields",
                    "items": [
                        {"key": "revision", "value": SAMPLE_REVISION},
                        {"key": "summary", "value": SUMMARY},
                    ],
                },
            ],
        }
    }
    assert_json_post(req, "/v1/im/chat/webhooks/incomingwebhook/ZOOMSECRET", body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="zoom",
        spec={},
        secret={
            "address": "{url}/v1/im/chat/webhooks/incomingwebhook/ZOOMSECRET",
            "token": "zoom-canary-token",
        },
        expect=expect_zoom,
        canaries=["zoom-canary-token", "{url}/v1/im/chat/webhooks/incomingwebhook/ZOOMSECRET"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://zoom.us/hook"}, "empty Zoom verification token"),
    ],
)
def test_missing_settings_give_fluxs_messages(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1: the construction errors of the type, word for word."""
    assert construction_error(ZoomNotifier, ProviderType.ZOOM, **kw) == message


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("https://zoom.us/h/x", "https://zoom.us/h/x?format=full"),
        ("https://zoom.us/h/x?format=message", "https://zoom.us/h/x?format=message"),
        ("https://zoom.us/h/x?b=2&a=1&format=", "https://zoom.us/h/x?a=1&b=2&format=full"),
    ],
)
def test_zoom_url(address: str, expected: str) -> None:
    assert zoom_url(address) == expected


def test_zoom_payload_and_raw_token() -> None:
    n = ZoomNotifier(opts(ProviderType.ZOOM, address="https://zoom.us/h/x", token="vtok"))
    req = n.build_request(event(metadata={}))
    assert req.headers["Authorization"] == "vtok"
    assert req.body == go(
        {
            "content": {
                "head": {"text": OBJ, "sub_head": {"text": "error"}},
                "body": [{"type": "message", "text": "Health check failed after 30s"}],
            }
        }
    )

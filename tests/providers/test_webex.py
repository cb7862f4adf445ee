"""Webex (markdown message to a room): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

from notification_controller.api.provider import ProviderType
from notification_controller.providers.webex import WebexNotifier
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    MSG,
    OBJ,
    SAMPLE_OBJ,
    SUMMARY,
    assert_json_post,
    event,
    go,
    one,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_webex(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Bearer webex-canary-token"
    markdown = f"✅ **{SAMPLE_OBJ}**\n{MSG}\n>**revision**: {SAMPLE_REVISION}\n>**summary**: {SUMMARY}\n"
    assert_json_post(req, "/v1/messages", {"roomId": "ROOMID123", "markdown": markdown})


CASES: list[ProviderCase] = [
    ProviderCase(
        type="webex",
        spec={"address": "{url}/v1/messages", "channel": "ROOMID123"},
        secret={"token": "webex-canary-token"},
        expect=expect_webex,
        canaries=["webex-canary-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


def test_webex_markdown_and_room() -> None:
    n = WebexNotifier(opts(ProviderType.WEBEX, address="https://webexapis.com/v1/messages", token="wt"))
    req = n.build_request(event())
    assert req.headers["Authorization"] == "Bearer wt"
    assert req.body == go(
        {
            "markdown": f"💣 **{OBJ}**\nHealth check failed after 30s\n>**env**: prod\n>**revision**: main@sha1:abc\n"
        }
    )  # roomId omitted: no channel

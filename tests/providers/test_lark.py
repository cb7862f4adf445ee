"""Lark / Feishu (interactive card on a bot webhook): its conformance case and the pure tests of its request
builder.
"""

from __future__ import annotations

from notification_controller.api.provider import ProviderType
from notification_controller.providers.lark import LarkNotifier
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


def expect_lark(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    content = f"**{MSG}**\n\nrevision: {SAMPLE_REVISION}\nsummary: {SUMMARY}\n"
    body = {
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": True},
            "header": {
                "title": {"tag": "plain_text", "content": f"💫 {SAMPLE_OBJ}"},
                "template": "turquoise",
            },
            "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": content}}],
        },
    }
    assert_json_post(req, "/open-apis/bot/v2/hook/LARKSECRET", body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="lark",
        spec={},
        secret={"address": "{url}/open-apis/bot/v2/hook/LARKSECRET"},
        expect=expect_lark,
        canaries=["{url}/open-apis/bot/v2/hook/LARKSECRET"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


def test_lark_card() -> None:
    n = LarkNotifier(opts(ProviderType.LARK, address="https://open.feishu.cn/open-apis/bot/v2/hook/x"))
    assert n.build_request(event()).body == go(
        {
            "msg_type": "interactive",
            "card": {
                "config": {"wide_screen_mode": True},
                "header": {"title": {"tag": "plain_text", "content": f"🚨 {OBJ}"}, "template": "red"},
                "elements": [
                    {
                        "tag": "div",
                        "text": {
                            "tag": "lark_md",
                            "content": "**Health check failed after 30s**\n\nenv: prod\nrevision: main@sha1:abc\n",
                        },
                    }
                ],
            },
        }
    )

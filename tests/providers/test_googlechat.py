"""Google Chat (card messages on a space webhook): its conformance case and the pure tests of its request
builder.
"""

from __future__ import annotations

import json
from typing import Any

from notification_controller.api.provider import ProviderType
from notification_controller.providers.googlechat import GoogleChatNotifier
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    MSG,
    OBJ,
    SAMPLE_OBJ,
    SUMMARY,
    assert_json_post,
    event,
    one,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_googlechat(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.query == {"key": "GCHATKEY", "token": "GCHATTOKEN"}

    def kv(label: str, content: str) -> dict[str, Any]:
        return {
            "textParagraph": None,
            "keyValue": {
                "topLabel": label,
                "content": content,
                "contentMultiline": False,
                "bottomLabel": None,
                "icon": None,
            },
        }

    body = {
        "cards": [
            {
                "header": {
                    "title": SAMPLE_OBJ,
                    "subtitle": "source-controller",
                    "imageUrl": None,
                    "imageStyle": None,
                },
                "sections": [
                    {"header": "", "widgets": [{"textParagraph": {"text": MSG}, "keyValue": None}]},
                    {"header": "", "widgets": [kv("revision", SAMPLE_REVISION), kv("summary", SUMMARY)]},
                ],
            }
        ]
    }
    assert_json_post(req, "/v1/spaces/AAA/messages", body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="googlechat",
        spec={},
        secret={"address": "{url}/v1/spaces/AAA/messages?key=GCHATKEY&token=GCHATTOKEN"},
        expect=expect_googlechat,
        canaries=["{url}/v1/spaces/AAA/messages?key=GCHATKEY&token=GCHATTOKEN"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


def test_googlechat_error_is_red_and_html_escaped_like_go() -> None:
    n = GoogleChatNotifier(opts(ProviderType.GOOGLE_CHAT, address="https://chat.googleapis.com/v1/x"))
    req = n.build_request(event(metadata={}))
    assert (
        b'"text":"\\u003cfont color=\\"#ff0000\\"\\u003eHealth check failed after 30s\\u003c/font\\u003e"'
        in req.body
    )
    body = json.loads(req.body)
    assert len(body["cards"][0]["sections"]) == 1  # no metadata section without metadata
    assert body["cards"][0]["header"] == {
        "title": OBJ,
        "subtitle": "kustomize-controller",
        "imageUrl": None,
        "imageStyle": None,
    }

"""Microsoft Teams (Adaptive Card for workflows, MessageCard for legacy webhooks): its conformance case and the
pure tests of its request builder.
"""

from __future__ import annotations

import json

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.msteams import MSTeamsNotifier
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


def expect_msteams(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    body = {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "content": {
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "type": "AdaptiveCard",
                    "version": "1.4",
                    "body": [
                        {
                            "type": "Container",
                            "items": [
                                {
                                    "type": "TextBlock",
                                    "text": SAMPLE_OBJ,
                                    "size": "large",
                                    "weight": "bolder",
                                    "wrap": True,
                                },
                                {"type": "TextBlock", "text": MSG, "wrap": True},
                                {
                                    "type": "FactSet",
                                    "facts": [
                                        {"title": "summary", "value": SUMMARY},
                                        {"title": "revision", "value": SAMPLE_REVISION},
                                    ],
                                },
                            ],
                        }
                    ],
                    "msteams": {"width": "Full"},
                },
            }
        ],
    }
    assert_json_post(req, "/workflows/TEAMSSECRET", body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="msteams",
        spec={},
        secret={"address": "{url}/workflows/TEAMSSECRET"},
        expect=expect_msteams,
        canaries=["{url}/workflows/TEAMSSECRET"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address", ["https://contoso.webhook.office.com/webhookb2/x", "https://contoso.webhook.office.com:443/x"]
)
def test_msteams_legacy_message_card(address: str) -> None:
    n = MSTeamsNotifier(opts(ProviderType.MSTEAMS, address=address))
    assert n.build_request(event()).body == go(
        {
            "@type": "MessageCard",
            "@context": "http://schema.org/extensions",
            "themeColor": "FF0000",
            "summary": OBJ,
            "sections": [
                {
                    "activityTitle": "Health check failed after 30s",
                    "activitySubtitle": OBJ,
                    "facts": [
                        {"name": "env", "value": "prod"},
                        {"name": "revision", "value": "main@sha1:abc"},
                    ],
                }
            ],
        }
    )
    info = json.loads(n.build_request(event(severity="info", metadata={})).body)
    assert info["themeColor"] == "0076D7"
    assert info["sections"][0]["facts"] == []


def test_msteams_adaptive_card_error_summary_first() -> None:
    n = MSTeamsNotifier(opts(ProviderType.MSTEAMS, address="https://prod.westus.logic.azure.com/workflows/x"))
    meta = {"zeta": "1", "summary": "Cluster A", "alpha": "2"}
    assert n.build_request(event(metadata=meta)).body == go(
        {
            "type": "message",
            "attachments": [
                {
                    "contentType": "application/vnd.microsoft.card.adaptive",
                    "content": {
                        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                        "type": "AdaptiveCard",
                        "version": "1.4",
                        "body": [
                            {
                                "type": "Container",
                                "items": [
                                    {
                                        "type": "TextBlock",
                                        "text": OBJ,
                                        "size": "large",
                                        "weight": "bolder",
                                        "wrap": True,
                                    },
                                    {
                                        "type": "TextBlock",
                                        "text": "Health check failed after 30s",
                                        "color": "attention",
                                        "wrap": True,
                                    },
                                    {
                                        "type": "FactSet",
                                        "facts": [
                                            {"title": "summary", "value": "Cluster A"},
                                            {"title": "alpha", "value": "2"},
                                            {"title": "zeta", "value": "1"},
                                        ],
                                    },
                                ],
                            }
                        ],
                        "msteams": {"width": "Full"},
                    },
                }
            ],
        }
    )


def test_msteams_adaptive_card_omitempty() -> None:
    """Go ``omitempty``: no ``text`` for an empty message, no ``facts`` without metadata."""
    n = MSTeamsNotifier(opts(ProviderType.MSTEAMS, address="https://example.com/x"))
    items = json.loads(n.build_request(event(severity="info", message="", metadata={})).body)["attachments"][
        0
    ]["content"]["body"][0]["items"]
    assert items[1] == {"type": "TextBlock", "wrap": True}
    assert items[2] == {"type": "FactSet"}

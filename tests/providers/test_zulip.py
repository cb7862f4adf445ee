"""Zulip (form-encoded stream message): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.zulip import ZulipNotifier, format_markdown_post
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import MSG, SUMMARY, construction_error, event, one, opts
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_zulip(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.method == "POST"
    assert req.path == "/api/v1/messages"
    assert req.headers["Content-Type"] == "application/x-www-form-urlencoded"
    creds = base64.b64encode(b"bot@zulip.example.com:zulip-canary-key").decode()
    assert req.headers["Authorization"] == f"Basic {creds}"
    content = (
        "## Flux Status\n\nℹ️ GitRepository/gitops-system/webapp\n\n"
        f"{MSG}\n\nMetadata:\n* `revision`: {SAMPLE_REVISION}\n* `summary`: {SUMMARY}\n"
    )
    pairs = parse_qsl(req.text(), keep_blank_values=True, strict_parsing=True)
    assert pairs == [("content", content), ("to", "flux"), ("topic", "deployments"), ("type", "stream")]
    assert "+" in req.text()  # spaces encoded the url.Values way


CASES: list[ProviderCase] = [
    ProviderCase(
        type="zulip",
        spec={"address": "{url}/some/path", "channel": "flux/deployments"},
        secret={"username": "bot@zulip.example.com", "password": "zulip-canary-key"},
        expect=expect_zulip,
        canaries=["zulip-canary-key"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"address": "https://z.example.com", "channel": "general"},
            "invalid Zulip channel format, expected <channel>/<topic>, got 'general'",
        ),
        (
            {"address": "https://z.example.com", "channel": "general/"},
            "invalid Zulip channel format, expected <channel>/<topic>, got 'general/'",
        ),
        (
            {"address": "https://z.example.com", "channel": "/topic"},
            "invalid Zulip channel format, expected <channel>/<topic>, got '/topic'",
        ),
    ],
)
def test_missing_settings_give_fluxs_messages(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1: the construction errors of the type, word for word."""
    assert construction_error(ZulipNotifier, ProviderType.ZULIP, **kw) == message


def test_zulip_form_post() -> None:
    n = ZulipNotifier(
        opts(
            ProviderType.ZULIP,
            address="https://z.example.com/ignored?x=1",
            channel="ops/flux/deploys",
            username="bot@z",
            password="key",
        )
    )
    req = n.build_request(event(metadata={"change_request": "7", "b": "2", "a": "1"}))
    assert req.url == "https://z.example.com/api/v1/messages?x=1"
    assert req.headers["Authorization"] == "Basic " + base64.b64encode(b"bot@z:key").decode()
    content = "## Flux Status\n\n⚠️ Kustomization/flux-system/apps\n\nHealth check failed after 30s\n\nMetadata:\n* `a`: 1\n* `b`: 2\n"
    assert format_markdown_post(event(metadata={"change_request": "7", "b": "2", "a": "1"})) == content
    assert (
        req.body
        == urlencode(
            [("content", content), ("to", "ops"), ("topic", "flux/deploys"), ("type", "stream")]
        ).encode()
    )
    assert "ℹ️ Kustomization" in format_markdown_post(event(severity="info"))

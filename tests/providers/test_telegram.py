"""Telegram (MarkdownV2 message through the Bot API; the token is in the URL): its conformance case and the
pure tests of its request builder.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notification_controller.api.provider import ProviderType
from notification_controller.errors import ProviderConfigError
from notification_controller.outbound import masked
from notification_controller.providers.telegram import TelegramNotifier, escape_markdown_v2
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import MSG, assert_json_post, construction_error, event, go, one, opts
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_telegram(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    text = (
        "*💫 gitrepository/webapp/gitops\\-system*\n"
        f"{MSG}\n"
        f"\\- *revision*: {SAMPLE_REVISION}\n"
        "\\- *summary*: Cluster prod\\-eu\n"
    )
    body = {"chat_id": "-100123", "message_thread_id": "42", "text": text, "parse_mode": "MarkdownV2"}
    assert_json_post(req, "/bot123456:TELEGRAMCANARY/sendMessage", body)


CASES: list[ProviderCase] = [
    ProviderCase(
        type="telegram",
        # Flux ignores the address: a stale one (nothing listens on port 9) must not receive the token.
        spec={"address": "http://127.0.0.1:9/stale", "channel": "-100123:42"},
        secret={"token": "123456:TELEGRAMCANARY"},
        env={"TELEGRAM_API_BASE_URL": "{url}"},
        expect=expect_telegram,
        canaries=["123456:TELEGRAMCANARY"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"token": "t0k3n"}, "empty Telegram channel"),
        ({"channel": "-100"}, "empty Telegram token"),
    ],
)
def test_missing_settings_give_fluxs_messages(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1: the construction errors of the type, word for word."""
    assert construction_error(TelegramNotifier, ProviderType.TELEGRAM, **kw) == message


def test_telegram_request() -> None:
    n = TelegramNotifier(opts(ProviderType.TELEGRAM, channel="@flux", token="123:ABC"))
    req = n.build_request(event(message="v1.2 (ok)!", metadata={"a_b": "x-y"}))
    assert req.url == "https://api.telegram.org/bot123:ABC/sendMessage"
    assert req.body == go(
        {
            "chat_id": "@flux",
            "text": "*🚨 kustomization/apps/flux\\-system*\nv1\\.2 \\(ok\\)\\!\n\\- *a\\_b*: x\\-y\n",
            "parse_mode": "MarkdownV2",
        }
    )


def test_telegram_ignores_the_address_like_flux(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token is in the URL: a (stale) address must never become the API host (issue 16)."""
    monkeypatch.delenv("TELEGRAM_API_BASE_URL", raising=False)
    n = TelegramNotifier(
        opts(ProviderType.TELEGRAM, channel="@flux", token="1:T", address="https://old-bot-proxy.example.com")
    )
    assert n.build_request(event()).url == "https://api.telegram.org/bot1:T/sendMessage"
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", "")
    assert TelegramNotifier(opts(ProviderType.TELEGRAM, channel="@flux", token="1:T")).url == (
        "https://api.telegram.org/bot1:T/sendMessage"
    )


def test_telegram_api_base_override_is_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", "http://bot-api:8081/")
    n = TelegramNotifier(
        opts(ProviderType.TELEGRAM, channel="-100:7:x", token="1:T", address="https://elsewhere.example.com")
    )
    req = n.build_request(event(severity="info"))
    assert req.url == "http://bot-api:8081/bot1:T/sendMessage"
    body = json.loads(req.body)
    assert (body["chat_id"], body["message_thread_id"]) == ("-100", "7:x")
    assert body["text"].startswith("*💫 ")


def test_telegram_bad_api_base_override_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", "file:///run/secrets/x")
    with pytest.raises(ProviderConfigError) as info:
        TelegramNotifier(opts(ProviderType.TELEGRAM, channel="@flux", token="1:T"))
    assert "TELEGRAM_API_BASE_URL" in str(info.value)
    assert "/run/secrets" not in str(info.value)


SPECIAL = "\\.-_[]()~>`#+=|{}!*"


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@given(st.text())
def test_markdown_v2_escaping_is_reversible_and_complete(text: str) -> None:
    escaped = escape_markdown_v2(text)
    assert _unescape(escaped) == text
    i = 0
    while i < len(escaped):  # every special character is preceded by exactly one backslash
        if escaped[i] == "\\":
            assert escaped[i + 1] in SPECIAL
            i += 2
        else:
            assert escaped[i] not in SPECIAL
            i += 1


tokens = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=6, max_size=40)


@settings(max_examples=80)
@given(token=tokens, body=st.text(max_size=60))
def test_telegram_token_never_survives_masking(token: str, body: str) -> None:
    """Reference §9: error texts built from the request URL and an echoing body never show the token."""
    n = TelegramNotifier(opts(ProviderType.TELEGRAM, channel="c", token=token))
    req = n.build_request(event())
    text = masked(f"POST {req.url}: request failed: {body}{token}{body}", n.opts.masks())
    assert token not in text

"""What the chat and incident family shares: an invalid address is refused with the type's message and
without its credentials, and (a property) any message and metadata give decodable JSON that carries them
intact, HTML-escaped the way Go's encoder does (reference §4.0).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notification_controller.api.provider import ProviderType
from notification_controller.errors import ProviderConfigError
from notification_controller.providers.alertmanager import AlertmanagerNotifier
from notification_controller.providers.googlechat import GoogleChatNotifier
from notification_controller.providers.grafana import GrafanaNotifier
from notification_controller.providers.lark import LarkNotifier
from notification_controller.providers.msteams import MSTeamsNotifier
from notification_controller.providers.registry import create_notifier
from notification_controller.providers.slack import SlackNotifier
from notification_controller.providers.zoom import ZoomNotifier
from tests.providers.support import INVALID_ADDRESSES, event, opts


@pytest.mark.parametrize("address", INVALID_ADDRESSES)
@pytest.mark.parametrize(
    ("ptype", "prefix"),
    [
        (ProviderType.ALERTMANAGER, "invalid Alertmanager URL"),
        (ProviderType.DISCORD, "invalid Discord hook URL"),
        (ProviderType.GOOGLE_CHAT, "invalid Google Chat hook URL"),
        (ProviderType.GRAFANA, "invalid Grafana URL"),
        (ProviderType.LARK, "invalid Lark hook URL"),
        (ProviderType.MATRIX, "invalid Matrix homeserver URL"),
        (ProviderType.MSTEAMS, "invalid MS Teams webhook URL"),
        (ProviderType.PAGERDUTY, "invalid PagerDuty endpoint URL"),
        (ProviderType.ROCKET, "invalid Rocket hook URL"),
        (ProviderType.SLACK, "invalid Slack hook URL"),
        (ProviderType.WEBEX, "invalid Webex hook URL"),
    ],
)
def test_invalid_address_is_rejected_without_echoing_it(
    ptype: ProviderType, prefix: str, address: str
) -> None:
    """Reference §4.0: URLs are validated at construction with each type's message; checklist E9: the
    credentials in an address are not echoed."""
    with pytest.raises(ProviderConfigError) as info:
        create_notifier(opts(ptype, address=address))
    assert str(info.value).startswith(prefix)
    assert "s3cretpw" not in str(info.value)


messages = st.text(max_size=200)

metadata = st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=40), max_size=5)


@settings(max_examples=60)
@given(message=messages, meta=metadata, severity=st.sampled_from(["info", "error", "trace", ""]))
def test_payloads_are_valid_json_and_carry_the_event(
    message: str, meta: dict[str, str], severity: str
) -> None:
    """Any message and metadata (control characters, ``<>&``, emojis...) give decodable JSON with the
    message and every metadata value intact."""
    ev = event(severity=severity, message=message, metadata=meta)
    slack = json.loads(
        SlackNotifier(opts(ProviderType.SLACK, address="https://s.test/h")).build_request(ev).body
    )
    assert slack["attachments"][0]["text"] == message
    assert {f["title"]: f["value"] for f in slack["attachments"][0]["fields"]} == meta
    am = json.loads(
        AlertmanagerNotifier(opts(ProviderType.ALERTMANAGER, address="https://a/x")).build_request(ev).body
    )
    assert am[0]["annotations"]["message"] == message
    zoom = json.loads(
        ZoomNotifier(opts(ProviderType.ZOOM, address="https://z/x", token="t")).build_request(ev).body
    )
    assert {i["key"]: i["value"] for b in zoom["content"]["body"] for i in b.get("items", [])} == meta
    teams = json.loads(
        MSTeamsNotifier(opts(ProviderType.MSTEAMS, address="https://t/x")).build_request(ev).body
    )
    assert teams["attachments"][0]["content"]["body"][0]["items"][1].get("text", "") == message
    for raw in (
        GoogleChatNotifier(opts(ProviderType.GOOGLE_CHAT, address="https://g/x")).build_request(ev).body,
        LarkNotifier(opts(ProviderType.LARK, address="https://l/x")).build_request(ev).body,
        GrafanaNotifier(opts(ProviderType.GRAFANA, address="https://g/x")).build_request(ev).body,
    ):
        assert b"<" not in raw and b">" not in raw and b"&" not in raw  # Go's HTML-safe encoding
        json.loads(raw)

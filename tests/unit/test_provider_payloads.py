"""Pure tests of the chat/incident providers' ``build_request`` (reference §4.0, §4.1).

No server: the request a notifier would send is compared with what reference §4.1 prescribes, for
info and error events, edge cases (no metadata, empty message, zero timestamp) and construction errors
(Flux's messages). Property tests cover escaping, encoding and masking. The over-the-wire behaviour
(retries, proxies, TLS, timeouts) is in ``tests/conformance/test_provider_conformance.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.core.redact import SecretValue
from notification_controller.errors import PermanentDeliveryError, ProviderConfigError
from notification_controller.outbound import OutboundResponse, masked
from notification_controller.providers.alertmanager import AlertmanagerNotifier, go_title
from notification_controller.providers.base import ProviderOptions
from notification_controller.providers.datadog import DatadogNotifier
from notification_controller.providers.formatting import format_name_and_description as name_and_description
from notification_controller.providers.formatting import split_camelcase
from notification_controller.providers.googlechat import GoogleChatNotifier
from notification_controller.providers.grafana import GrafanaNotifier
from notification_controller.providers.incidentio import IncidentIONotifier
from notification_controller.providers.lark import LarkNotifier
from notification_controller.providers.matrix import MatrixNotifier
from notification_controller.providers.msteams import MSTeamsNotifier
from notification_controller.providers.opsgenie import OpsgenieNotifier
from notification_controller.providers.pagerduty import PagerDutyNotifier
from notification_controller.providers.sentry import SentryNotifier
from notification_controller.providers.slack import (
    DiscordNotifier,
    RocketNotifier,
    SlackNotifier,
    discord_url,
)
from notification_controller.providers.telegram import TelegramNotifier, escape_markdown_v2
from notification_controller.providers.webex import WebexNotifier
from notification_controller.providers.zoom import ZoomNotifier, zoom_url
from notification_controller.providers.zulip import ZulipNotifier, format_markdown_post

OBJ = "kustomization/apps.flux-system"


def event(
    severity: str = "error",
    message: str = "Health check failed after 30s",
    metadata: dict[str, str] | None = None,
    reason: str = "HealthCheckFailed",
    timestamp: str | None = "2026-01-02T03:04:05Z",
    controller: str = "kustomize-controller",
) -> Event:
    return Event.from_raw(
        {
            "involvedObject": {
                "kind": "Kustomization",
                "namespace": "flux-system",
                "name": "apps",
                "uid": "uid-1",
            },
            "severity": severity,
            "timestamp": timestamp,
            "message": message,
            "reason": reason,
            "metadata": {"revision": "main@sha1:abc", "env": "prod"} if metadata is None else metadata,
            "reportingController": controller,
        }
    )


def opts(ptype: ProviderType, **kw: Any) -> ProviderOptions:
    for key in ("token", "password"):
        if isinstance(kw.get(key), str):
            kw[key] = SecretValue(kw[key])
    return ProviderOptions(type=ptype, name="p", namespace="ns", uid="puid", **kw)


def go(value: Any) -> bytes:
    """Go's compact encoding of a literal whose dict order is the expected field order."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


# --------------------------------------------------------------------------------------------------
# construction errors (Flux's messages, never the address)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "ptype", "label"),
    [
        (SlackNotifier, ProviderType.SLACK, "Slack hook URL"),
        (DiscordNotifier, ProviderType.DISCORD, "Discord hook URL"),
        (RocketNotifier, ProviderType.ROCKET, "Rocket hook URL"),
        (MSTeamsNotifier, ProviderType.MSTEAMS, "MS Teams webhook URL"),
        (GoogleChatNotifier, ProviderType.GOOGLE_CHAT, "Google Chat hook URL"),
        (WebexNotifier, ProviderType.WEBEX, "Webex hook URL"),
        (LarkNotifier, ProviderType.LARK, "Lark hook URL"),
        (MatrixNotifier, ProviderType.MATRIX, "Matrix homeserver URL"),
        (AlertmanagerNotifier, ProviderType.ALERTMANAGER, "Alertmanager URL"),
        (GrafanaNotifier, ProviderType.GRAFANA, "Grafana URL"),
        (PagerDutyNotifier, ProviderType.PAGERDUTY, "PagerDuty endpoint URL"),
    ],
)
@pytest.mark.parametrize("address", ["", "ftp://host/x", "not a url", "https://user:s3cretpw@host:99999/p"])
def test_invalid_address_is_rejected_without_echoing_it(
    cls: Any, ptype: ProviderType, label: str, address: str
) -> None:
    """Reference §4.0: URLs are validated at construction; checklist E9: credentials are not echoed."""
    with pytest.raises(ProviderConfigError) as info:
        cls(opts(ptype, address=address))
    assert str(info.value).startswith(f"invalid {label}")
    assert "s3cretpw" not in str(info.value)


@pytest.mark.parametrize(
    ("cls", "ptype", "kw", "message"),
    [
        (TelegramNotifier, ProviderType.TELEGRAM, {"token": "t0k3n"}, "empty Telegram channel"),
        (TelegramNotifier, ProviderType.TELEGRAM, {"channel": "-100"}, "empty Telegram token"),
        (OpsgenieNotifier, ProviderType.OPSGENIE, {"address": "https://api.opsgenie.com/v2/alerts"},
         "empty Opsgenie apikey/token"),
        (DatadogNotifier, ProviderType.DATADOG, {"address": "https://api.datadoghq.eu"}, "token cannot be empty"),
        (ZoomNotifier, ProviderType.ZOOM, {"address": "https://zoom.us/hook"}, "empty Zoom verification token"),
        (IncidentIONotifier, ProviderType.INCIDENT_IO, {"address": "https://api.incident.io/v2/x"},
         "empty incident.io API token"),
        (SentryNotifier, ProviderType.SENTRY, {}, "DSN cannot be empty"),
        (ZulipNotifier, ProviderType.ZULIP, {"address": "https://z.example.com", "channel": "general"},
         "invalid Zulip channel format, expected <channel>/<topic>, got 'general'"),
        (ZulipNotifier, ProviderType.ZULIP, {"address": "https://z.example.com", "channel": "general/"},
         "invalid Zulip channel format, expected <channel>/<topic>, got 'general/'"),
        (ZulipNotifier, ProviderType.ZULIP, {"address": "https://z.example.com", "channel": "/topic"},
         "invalid Zulip channel format, expected <channel>/<topic>, got '/topic'"),
    ],
)  # fmt: skip
def test_missing_settings_give_fluxs_messages(
    cls: Any, ptype: ProviderType, kw: dict[str, Any], message: str
) -> None:
    """Reference §4.1: the construction errors of each type, word for word."""
    with pytest.raises(ProviderConfigError) as info:
        cls(opts(ptype, **kw))
    assert str(info.value) == message


@pytest.mark.parametrize("dsn", ["https://host/42", "ftp://k@host/42", "https://k@host/", "https://k@:1/42"])
def test_invalid_sentry_dsn_never_echoes_it(dsn: str) -> None:
    with pytest.raises(ProviderConfigError) as info:
        SentryNotifier(opts(ProviderType.SENTRY, address=dsn))
    assert str(info.value).startswith("invalid Sentry DSN: ")
    assert dsn not in str(info.value)


# --------------------------------------------------------------------------------------------------
# slack, discord, rocket
# --------------------------------------------------------------------------------------------------


def test_slack_error_event_exact_body() -> None:
    n = SlackNotifier(opts(ProviderType.SLACK, address="https://hooks.slack.com/services/X", channel="ops"))
    req = n.build_request(event(message="first line\nsecond"))
    assert req.method == "POST"
    assert req.url == "https://hooks.slack.com/services/X"
    assert "Authorization" not in req.headers
    assert req.body == go(
        {
            "channel": "ops",
            "username": "kustomize-controller",
            "icon_url": "",
            "icon_emoji": "",
            "attachments": [
                {
                    "fallback": f"{OBJ}: first line",
                    "color": "danger",
                    "author_name": OBJ,
                    "text": "first line\nsecond",
                    "mrkdwn_in": ["text"],
                    "fields": [
                        {"title": "env", "value": "prod", "short": False},
                        {"title": "revision", "value": "main@sha1:abc", "short": False},
                    ],
                }
            ],
        }
    )


def test_slack_username_and_token() -> None:
    n = SlackNotifier(opts(ProviderType.SLACK, address="https://x.test/h", username="bot", token="xoxb-1"))
    req = n.build_request(event(severity="info", metadata={}))
    body = json.loads(req.body)
    assert body["username"] == "bot"
    assert body["attachments"][0]["color"] == "good"
    assert body["attachments"][0]["fields"] == []
    assert req.headers["Authorization"] == "Bearer xoxb-1"


def test_slack_web_api_response_is_validated() -> None:
    """Reference §4.1: on chat.postMessage a 200 with ``ok: false`` is a failure."""
    api = SlackNotifier(opts(ProviderType.SLACK, address="https://slack.com/api/chat.postMessage", token="t"))
    api.check_response(OutboundResponse(200, {}, b'{"ok":true}'))
    with pytest.raises(PermanentDeliveryError, match=r"^Slack responded with error: channel_not_found$"):
        api.check_response(OutboundResponse(200, {}, b'{"ok":false,"error":"channel_not_found"}'))
    with pytest.raises(PermanentDeliveryError, match="unable to unmarshal response body"):
        api.check_response(OutboundResponse(200, {}, b"ok"))
    hook = SlackNotifier(opts(ProviderType.SLACK, address="https://hooks.slack.com/services/X"))
    hook.check_response(OutboundResponse(200, {}, b"ok"))  # webhooks answer plain "ok"


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("https://discord.com/api/webhooks/1/abc", "https://discord.com/api/webhooks/1/abc/slack"),
        ("https://discord.com/api/webhooks/1/abc/", "https://discord.com/api/webhooks/1/abc/slack"),
        ("https://discord.com/api/webhooks/1/abc/slack", "https://discord.com/api/webhooks/1/abc/slack"),
        (
            "https://discord.com/api/webhooks/1/abc?wait=true",
            "https://discord.com/api/webhooks/1/abc/slack?wait=true",
        ),
        ("https://discord.com", "https://discord.com/slack"),
        ("https://discord.com/a//b/../c", "https://discord.com/a/c/slack"),
    ],
)
def test_discord_url_gets_slack_suffix(address: str, expected: str) -> None:
    """Reference §4.1: ``path.Join(path, "slack")`` unless the URL already ends with ``/slack``."""
    assert discord_url(address) == expected
    n = DiscordNotifier(opts(ProviderType.DISCORD, address=address))
    assert n.build_request(event()).url == expected


def test_discord_and_rocket_payloads() -> None:
    d = DiscordNotifier(opts(ProviderType.DISCORD, address="https://d.test/h", channel="x"))
    body = json.loads(d.build_request(event(metadata={})).body)
    assert body["channel"] == ""
    assert body["username"] == "kustomize-controller"
    assert body["attachments"][0]["fallback"] == ""
    assert body["attachments"][0]["color"] == "danger"
    r = RocketNotifier(opts(ProviderType.ROCKET, address="https://r.test/h", channel="#c"))
    body = json.loads(r.build_request(event(metadata={})).body)
    assert (body["channel"], body["username"]) == ("#c", "")
    assert body["attachments"][0]["color"] == "#FF0000"
    info = json.loads(r.build_request(event(severity="info")).body)
    assert info["attachments"][0]["color"] == "#0076D7"


# --------------------------------------------------------------------------------------------------
# msteams
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# googlechat, webex, telegram, lark, matrix
# --------------------------------------------------------------------------------------------------


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


def test_webex_markdown_and_room() -> None:
    n = WebexNotifier(opts(ProviderType.WEBEX, address="https://webexapis.com/v1/messages", token="wt"))
    req = n.build_request(event())
    assert req.headers["Authorization"] == "Bearer wt"
    assert req.body == go(
        {
            "markdown": f"💣 **{OBJ}**\nHealth check failed after 30s\n>**env**: prod\n>**revision**: main@sha1:abc\n"
        }
    )  # roomId omitted: no channel


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


def test_matrix_put_with_go_exact_txn_id() -> None:
    """Reference §4.1/§9: txn id = SHA-1 of the event's Go JSON, including Go's HTML escaping."""
    ev = event(message="a <b> & c", metadata={})
    go_event = (
        b'{"involvedObject":{"kind":"Kustomization","namespace":"flux-system","name":"apps","uid":"uid-1"},'
        b'"severity":"error","timestamp":"2026-01-02T03:04:05Z","message":"a \\u003cb\\u003e \\u0026 c",'
        b'"reason":"HealthCheckFailed","reportingController":"kustomize-controller"}'
    )
    txn = hashlib.sha1(go_event, usedforsecurity=False).hexdigest()
    n = MatrixNotifier(opts(ProviderType.MATRIX, address="https://m.org", channel="!r:m.org", token="mt"))
    req = n.build_request(ev)
    assert req.method == "PUT"
    assert req.url == f"https://m.org/_matrix/client/r0/rooms/!r:m.org/send/m.room.message/{txn}"
    assert req.headers["Authorization"] == "Bearer mt"
    assert req.body == go({"body": f"🚨 {OBJ}\na \u003cb\u003e \u0026 c\n", "msgtype": "m.text"})


# --------------------------------------------------------------------------------------------------
# opsgenie, alertmanager, grafana, pagerduty, datadog
# --------------------------------------------------------------------------------------------------


def test_opsgenie_alert() -> None:
    n = OpsgenieNotifier(
        opts(ProviderType.OPSGENIE, address="https://api.opsgenie.com/v2/alerts", token="gk")
    )
    req = n.build_request(event())
    assert req.headers["Authorization"] == "GenieKey gk"
    alias = hashlib.sha256(b"puid/Kustomization/flux-system/apps/HealthCheckFailed").hexdigest()
    assert req.body == go(
        {
            "message": "Kustomization/apps",
            "alias": alias,
            "description": "Health check failed after 30s",
            "details": {"env": "prod", "revision": "main@sha1:abc", "severity": "error"},
        }
    )


def test_alertmanager_alert_and_auth_precedence() -> None:
    n = AlertmanagerNotifier(
        opts(
            ProviderType.ALERTMANAGER,
            address="https://am/api/v2/alerts",
            token="tok",
            username="u",
            password="p",
        )
    )
    req = n.build_request(event(metadata={"summary": "S", "env": "prod"}, timestamp=None))
    assert req.headers["Authorization"] == "Basic " + base64.b64encode(b"u:p").decode()  # basic wins
    assert req.body == go(
        [
            {
                "status": "firing",
                "labels": {
                    "alertname": "FluxKustomizationHealthcheckfailed",
                    "env": "prod",
                    "kind": "Kustomization",
                    "name": "apps",
                    "namespace": "flux-system",
                    "reason": "HealthCheckFailed",
                    "reportingcontroller": "kustomize-controller",
                    "severity": "error",
                },
                "annotations": {"message": "Health check failed after 30s", "summary": "S"},
                "startsAt": "0001-01-01T00:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
            }
        ]
    )
    only_token = AlertmanagerNotifier(opts(ProviderType.ALERTMANAGER, address="https://am/x", token="tok"))
    assert only_token.build_request(event()).headers["Authorization"] == "Bearer tok"
    none = AlertmanagerNotifier(opts(ProviderType.ALERTMANAGER, address="https://am/x"))
    assert "Authorization" not in none.build_request(event()).headers


@pytest.mark.parametrize(
    ("reason", "title"),
    [
        ("ApplySucceeded", "Applysucceeded"),
        ("health check failed", "Health Check Failed"),
        ("abc1DEF", "Abc1def"),
        ("1st-try", "1St-Try"),  # digits neither start nor break a word
        ("", ""),
    ],
)
def test_go_title(reason: str, title: str) -> None:
    """``cases.Title(language.Und)`` (reference §4.1, derived values)."""
    assert go_title(reason) == title


def test_grafana_annotation() -> None:
    n = GrafanaNotifier(opts(ProviderType.GRAFANA, address="https://g/api/annotations/graphite", token="gt"))
    req = n.build_request(event(metadata={"url": "http://x:8080"}))
    assert req.headers["Authorization"] == "Bearer gt"
    assert req.body == go(
        {
            "when": 1767323045,
            "text": OBJ,
            "tags": [
                "flux",
                "kustomize-controller",
                "url: http|//x|8080",
                "kind: Kustomization",
                "name: apps",
                "namespace: flux-system",
            ],
        }
    )
    basic = GrafanaNotifier(opts(ProviderType.GRAFANA, address="https://g/a", username="u", password="p"))
    assert basic.build_request(event()).headers["Authorization"] == "Basic dTpw"
    assert (
        "Authorization"
        not in GrafanaNotifier(opts(ProviderType.GRAFANA, address="https://g/a"))
        .build_request(event())
        .headers
    )


def test_pagerduty_error_triggers() -> None:
    n = PagerDutyNotifier(
        opts(ProviderType.PAGERDUTY, address="https://events.pagerduty.com/x?y=1", channel="rk")
    )
    [req] = n.build_requests(event())
    assert req.url == "https://events.pagerduty.com/v2/enqueue"
    assert req.body == go(
        {
            "routing_key": "rk",
            "event_action": "trigger",
            "dedup_key": "uid-1",
            "payload": {
                "summary": "health check failed: kustomization/apps",
                "source": "Flux kustomize-controller",
                "severity": "error",
                "timestamp": "2026-01-02T03:04:05Z",
                "component": "apps",
                "group": "Kustomization",
                "custom_details": {
                    "message": "Health check failed after 30s",
                    "metadata": {"env": "prod", "revision": "main@sha1:abc"},
                },
            },
        }
    )


def test_pagerduty_info_resolves_and_sends_change_event_trace_only_resolves() -> None:
    n = PagerDutyNotifier(opts(ProviderType.PAGERDUTY, address="http://pd:8080", channel="rk"))
    info = n.build_requests(event(severity="info", metadata={}, reason="ReconciliationSucceeded"))
    assert [r.url for r in info] == ["http://pd:8080/v2/enqueue", "http://pd:8080/v2/change/enqueue"]
    assert json.loads(info[0].body) == {"routing_key": "rk", "event_action": "resolve", "dedup_key": "uid-1"}
    assert info[1].body == go(
        {
            "routing_key": "rk",
            "payload": {
                "summary": "reconciliation succeeded: kustomization/apps",
                "source": "Flux kustomize-controller",
                "timestamp": "2026-01-02T03:04:05Z",
                "custom_details": {"message": "Health check failed after 30s", "metadata": {}},
            },
        }
    )
    assert len(n.build_requests(event(severity="trace"))) == 1
    assert not n.should_send(event(reason="Progressing"))
    assert n.should_send(event(reason="progressing"))


@pytest.mark.parametrize("raw_metadata", ["absent", None, {}])
def test_pagerduty_metadata_is_an_empty_object_not_null(raw_metadata: Any) -> None:
    """Flux's event server always gives the event a metadata map: ``custom_details.metadata`` is ``{}``."""
    raw: dict[str, Any] = {
        "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "apps", "uid": "u"},
        "severity": "error",
        "message": "boom",
        "reason": "HealthCheckFailed",
        "reportingController": "kustomize-controller",
    }
    if raw_metadata != "absent":
        raw["metadata"] = raw_metadata
    n = PagerDutyNotifier(opts(ProviderType.PAGERDUTY, address="https://events.pagerduty.com", channel="rk"))
    [trigger] = n.build_requests(Event.from_raw(raw))
    assert b'"custom_details":{"message":"boom","metadata":{}}' in trigger.body
    raw["severity"] = "info"
    _, change = n.build_requests(Event.from_raw(raw))
    assert b'"custom_details":{"message":"boom","metadata":{}}' in change.body


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("ApplySucceeded", ["Apply", "Succeeded"]),
        ("PDFLoader", ["PDF", "Loader"]),
        ("Reason2Go", ["Reason", "2", "Go"]),
        ("already lower", ["already", " ", "lower"]),
        ("", []),
    ],
)
def test_split_camelcase(text: str, parts: list[str]) -> None:
    assert split_camelcase(text) == parts


def test_name_and_description() -> None:
    assert name_and_description(event(reason="DependencyNotReady")) == (
        "kustomization/apps",
        "dependency not ready",
    )


def test_datadog_event() -> None:
    n = DatadogNotifier(opts(ProviderType.DATADOG, address="https://api.datadoghq.eu/ignored", token="ddk"))
    req = n.build_request(event(metadata={"Env": "PROD"}))
    assert req.url == "https://api.datadoghq.eu/api/v1/events"
    assert req.headers["DD-API-KEY"] == "ddk"
    assert req.body == go(
        {
            "alert_type": "error",
            "date_happened": 1767323045,
            "source_type_name": "fluxcd",
            "tags": [
                "flux_reporting_controller:kustomize-controller",
                "flux_reason:healthcheckfailed",
                "kube_kind:kustomization",
                "kube_name:apps",
                "kube_namespace:flux-system",
                "env:prod",
            ],
            "text": "Health check failed after 30s",
            "title": "Events from the Kustomization apps/flux-system",
        }
    )
    default = DatadogNotifier(opts(ProviderType.DATADOG, token="ddk"))
    assert default.build_request(event()).url == "https://api.datadoghq.com/api/v1/events"


# --------------------------------------------------------------------------------------------------
# zulip, zoom, incident.io, sentry
# --------------------------------------------------------------------------------------------------


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


def test_incidentio_firing_and_skips() -> None:
    n = IncidentIONotifier(opts(ProviderType.INCIDENT_IO, address="https://api.incident.io/v2/x", token="it"))
    req = n.build_request(event(controller="", message=""))
    assert req.headers["Authorization"] == "Bearer it"
    assert req.body == go(
        {
            "title": f"{OBJ}: HealthCheckFailed",
            "status": "firing",
            "deduplication_key": "uid-1",
            "metadata": {
                "env": "prod",
                "reason": "HealthCheckFailed",
                "revision": "main@sha1:abc",
                "severity": "error",
            },
        }
    )
    assert not n.should_send(event(reason="Progressing"))


def test_sentry_error_event_and_envelope_url() -> None:
    n = SentryNotifier(opts(ProviderType.SENTRY, address="https://pubkey@sentry.example.com:9000/sub/42"))
    req = n.build_request(event())
    assert req.url == "https://sentry.example.com:9000/sub/api/42/envelope/"
    assert "sentry_key=pubkey," in req.headers["X-Sentry-Auth"]
    header, item_header, payload, _ = req.body.split(b"\n")
    item = json.loads(payload)
    assert json.loads(item_header) == {"type": "event", "length": len(payload)}
    assert item["event_id"] == json.loads(header)["event_id"]
    assert item["level"] == "error"
    assert item["server_name"] == "kustomize-controller"
    assert item["transaction"] == "Kustomization: flux-system/apps"
    assert item["message"] == "Health check failed after 30s"
    assert item["contexts"] == {"metadata": {"env": "prod", "revision": "main@sha1:abc"}}
    assert "environment" not in item
    assert n.build_request(event()).body == req.body  # deterministic ids: a retry is de-duplicated
    assert not n.should_send(event(severity="trace"))
    assert "pubkey" not in repr(n.dsn)


# --------------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------------

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


@given(st.text(min_size=0, max_size=40))
def test_split_camelcase_loses_nothing(text: str) -> None:
    assert "".join(split_camelcase(text)) == text


@given(st.text(max_size=40))
def test_go_title_is_idempotent(text: str) -> None:
    assert go_title(go_title(text)) == go_title(text)


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


tokens = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=6, max_size=40)


@settings(max_examples=80)
@given(token=tokens, body=st.text(max_size=60))
def test_telegram_token_never_survives_masking(token: str, body: str) -> None:
    """Reference §9: error texts built from the request URL and an echoing body never show the token."""
    n = TelegramNotifier(opts(ProviderType.TELEGRAM, channel="c", token=token))
    req = n.build_request(event())
    text = masked(f"POST {req.url}: request failed: {body}{token}{body}", n.opts.masks())
    assert token not in text

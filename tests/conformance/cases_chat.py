"""Conformance cases of the chat, incident and observability providers (+ generic, generic-hmac).

Every ``expect`` checks the delivered request against reference §4.1 for the kit's sample event
(``tests.conformance.build.SAMPLE_EVENT``): method, path, auth headers and the exact body bytes. Expected
bodies are written out by hand here, in Flux's field order, and encoded with a small Go-compatible
encoder local to this file — never with the code under test.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from tests.conformance.build import PROVIDER_UID, SAMPLE_REVISION
from tests.conformance.case import ProviderCase
from tests.support.capture import CapturedRequest

OBJ = "gitrepository/webapp.gitops-system"
MSG = "stored artifact for revision 'main@sha1:0123456'\nfetched 3 files"
FIRST_LINE = "stored artifact for revision 'main@sha1:0123456'"
UID = "a1b2c3d4-0000-4000-8000-00000000beef"
SUMMARY = "Cluster prod-eu"
WHEN = "2026-03-01T10:20:30Z"
WHEN_UNIX = calendar.timegm(datetime(2026, 3, 1, 10, 20, 30, tzinfo=UTC).utctimetuple())

# The sample event as Go's json.Marshal writes it (reference §2), by hand.
SAMPLE_GO_JSON = (
    b'{"involvedObject":{"kind":"GitRepository","namespace":"gitops-system","name":"webapp",'
    b'"uid":"a1b2c3d4-0000-4000-8000-00000000beef","apiVersion":"source.toolkit.fluxcd.io/v1"},'
    b'"severity":"info","timestamp":"2026-03-01T10:20:30Z",'
    b'"message":"stored artifact for revision \'main@sha1:0123456\'\\nfetched 3 files",'
    b'"reason":"ReconciliationSucceeded",'
    b'"metadata":{"revision":"main@sha1:0123456789abcdef0123456789abcdef01234567","summary":"Cluster prod-eu"},'
    b'"reportingController":"source-controller","reportingInstance":"source-controller-7f9c"}'
)


def go_json(value: Any) -> bytes:
    """Compact JSON, UTF-8 kept, ``<>&`` escaped as Go does; dict order is the literal's order."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(ch, esc)
    return text.encode()


def one(requests: list[CapturedRequest]) -> CapturedRequest:
    assert len(requests) == 1, [r.raw_path for r in requests]
    return requests[0]


def assert_json_post(req: CapturedRequest, path: str, body: Any, method: str = "POST") -> None:
    assert req.method == method
    assert req.path == path
    assert req.headers["Content-Type"] == "application/json"
    assert req.body == go_json(body), req.body.decode()


# --------------------------------------------------------------------------------------------------
# generic, generic-hmac
# --------------------------------------------------------------------------------------------------


def expect_generic(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.method == "POST"
    assert req.path == "/hook/GENERICSECRET"
    assert req.headers["gotk-component"] == "source-controller"
    assert req.headers["X-Api-Key"] == "generic-canary-header"
    assert req.headers["Content-Type"] == "application/json"
    assert req.body == SAMPLE_GO_JSON
    assert "X-Signature" not in req.headers


def expect_generic_hmac(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.path == "/hook/HMACSECRET"
    assert req.body == SAMPLE_GO_JSON
    digest = hmac.new(b"hmac-canary-key", SAMPLE_GO_JSON, hashlib.sha256).hexdigest()
    assert req.headers["X-Signature"] == f"sha256={digest}"


# --------------------------------------------------------------------------------------------------
# slack, discord, rocket
# --------------------------------------------------------------------------------------------------

SLACK_FIELDS = [
    {"title": "revision", "value": SAMPLE_REVISION, "short": False},
    {"title": "summary", "value": SUMMARY, "short": False},
]


def slack_body(channel: str, username: str, fallback: str, color: str) -> dict[str, Any]:
    return {
        "channel": channel,
        "username": username,
        "icon_url": "",
        "icon_emoji": "",
        "attachments": [
            {
                "fallback": fallback,
                "color": color,
                "author_name": OBJ,
                "text": MSG,
                "mrkdwn_in": ["text"],
                "fields": SLACK_FIELDS,
            }
        ],
    }


def expect_slack(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Bearer xoxb-canary-slack-token"
    body = slack_body("general", "source-controller", f"{OBJ}: {FIRST_LINE}", "good")
    assert_json_post(req, "/services/T0/B0/SLACKHOOKSECRET", body)


def expect_discord(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert "Authorization" not in req.headers
    assert_json_post(req, "/api/webhooks/123/DISCORDSECRET/slack", slack_body("", "flux-bot", "", "good"))


def expect_rocket(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert_json_post(req, "/hooks/ROCKETSECRET/abc", slack_body("#ops", "fluxbot", "", "#0076D7"))


# --------------------------------------------------------------------------------------------------
# msteams, googlechat, webex, telegram, lark, matrix
# --------------------------------------------------------------------------------------------------


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
                                    "text": OBJ,
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
                    "title": OBJ,
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


def expect_webex(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Bearer webex-canary-token"
    markdown = f"✅ **{OBJ}**\n{MSG}\n>**revision**: {SAMPLE_REVISION}\n>**summary**: {SUMMARY}\n"
    assert_json_post(req, "/v1/messages", {"roomId": "ROOMID123", "markdown": markdown})


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


def expect_lark(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    content = f"**{MSG}**\n\nrevision: {SAMPLE_REVISION}\nsummary: {SUMMARY}\n"
    body = {
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": True},
            "header": {"title": {"tag": "plain_text", "content": f"💫 {OBJ}"}, "template": "turquoise"},
            "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": content}}],
        },
    }
    assert_json_post(req, "/open-apis/bot/v2/hook/LARKSECRET", body)


def expect_matrix(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    txn = hashlib.sha1(SAMPLE_GO_JSON, usedforsecurity=False).hexdigest()
    assert req.headers["Authorization"] == "Bearer matrix-canary-token"
    body = {
        "body": f"💫 {OBJ}\n{MSG}\n- revision: {SAMPLE_REVISION}\n- summary: {SUMMARY}\n",
        "msgtype": "m.text",
    }
    assert_json_post(
        req, f"/_matrix/client/r0/rooms/!room:example.org/send/m.room.message/{txn}", body, "PUT"
    )


# --------------------------------------------------------------------------------------------------
# opsgenie, alertmanager, grafana, pagerduty, datadog
# --------------------------------------------------------------------------------------------------


def expect_opsgenie(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "GenieKey opsgenie-canary-key"
    alias = hashlib.sha256(
        f"{PROVIDER_UID}/GitRepository/gitops-system/webapp/ReconciliationSucceeded".encode()
    ).hexdigest()
    body = {
        "message": "GitRepository/webapp",
        "alias": alias,
        "description": MSG,
        "details": {"revision": SAMPLE_REVISION, "severity": "info", "summary": SUMMARY},
    }
    assert_json_post(req, "/v2/alerts", body)


def expect_alertmanager(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Bearer am-canary-token"
    body = [
        {
            "status": "firing",
            "labels": {
                "alertname": "FluxGitRepositoryReconciliationsucceeded",
                "kind": "GitRepository",
                "name": "webapp",
                "namespace": "gitops-system",
                "reason": "ReconciliationSucceeded",
                "reportingcontroller": "source-controller",
                "revision": SAMPLE_REVISION,
                "severity": "info",
            },
            "annotations": {"message": MSG, "summary": SUMMARY},
            "startsAt": WHEN,
            "endsAt": "0001-01-01T00:00:00Z",
        }
    ]
    assert_json_post(req, "/api/v2/alerts", body)


def expect_grafana(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Basic " + base64.b64encode(b"admin:grafana-canary-pass").decode()
    tags = [
        "flux",
        "source-controller",
        "revision: main@sha1|0123456789abcdef0123456789abcdef01234567",
        f"summary: {SUMMARY}",
        "kind: GitRepository",
        "name: webapp",
        "namespace: gitops-system",
    ]
    assert_json_post(req, "/api/annotations/graphite", {"when": WHEN_UNIX, "text": OBJ, "tags": tags})


def expect_pagerduty(requests: list[CapturedRequest]) -> None:
    assert [r.path for r in requests] == ["/v2/enqueue", "/v2/change/enqueue"]
    assert_json_post(
        requests[0],
        "/v2/enqueue",
        {"routing_key": "pd-routing-key", "event_action": "resolve", "dedup_key": UID},
    )
    change = {
        "routing_key": "pd-routing-key",
        "payload": {
            "summary": "reconciliation succeeded: gitrepository/webapp",
            "source": "Flux source-controller",
            "timestamp": WHEN,
            "custom_details": {"message": MSG, "metadata": {"revision": SAMPLE_REVISION, "summary": SUMMARY}},
        },
    }
    assert_json_post(requests[1], "/v2/change/enqueue", change)


def expect_datadog(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["DD-API-KEY"] == "dd-canary-api-key"
    body = {
        "alert_type": "info",
        "date_happened": WHEN_UNIX,
        "source_type_name": "fluxcd",
        "tags": [
            "flux_reporting_controller:source-controller",
            "flux_reason:reconciliationsucceeded",
            "kube_kind:gitrepository",
            "kube_name:webapp",
            "kube_namespace:gitops-system",
            f"revision:{SAMPLE_REVISION}",
            "summary:cluster prod-eu",
        ],
        "text": MSG,
        "title": "Events from the GitRepository webapp/gitops-system",
    }
    assert_json_post(req, "/api/v1/events", body)


# --------------------------------------------------------------------------------------------------
# zulip, zoom, incident.io, sentry
# --------------------------------------------------------------------------------------------------


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


def expect_zoom(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.query == {"format": "full"}
    assert req.headers["Authorization"] == "zoom-canary-token"
    body = {
        "content": {
            "head": {"text": OBJ, "sub_head": {"text": "info"}},
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


def expect_incidentio(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Bearer incident-canary-token"
    body = {
        "title": f"{OBJ}: ReconciliationSucceeded",
        "status": "resolved",
        "deduplication_key": UID,
        "description": MSG,
        "metadata": {
            "reason": "ReconciliationSucceeded",
            "reportingController": "source-controller",
            "revision": SAMPLE_REVISION,
            "severity": "info",
            "summary": SUMMARY,
        },
    }
    assert_json_post(req, "/v2/alert_events/http/01ABC", body)


def expect_sentry(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.method == "POST"
    assert req.path == "/api/42/envelope/"
    assert req.headers["Content-Type"] == "application/x-sentry-envelope"
    assert req.headers["X-Sentry-Auth"] == (
        "Sentry sentry_version=7, sentry_key=sentrycanarykey, sentry_client=notification-controller/0.1"
    )
    header, item_header, payload, trailer = req.body.split(b"\n")
    assert trailer == b""
    event_id = json.loads(header)["event_id"]
    assert len(event_id) == 32 and int(event_id, 16) >= 0
    assert json.loads(item_header) == {"type": "transaction", "length": len(payload)}
    item = json.loads(payload)
    assert item["event_id"] == event_id
    assert item["type"] == "transaction"
    assert item["transaction"] == "GitRepository: gitops-system/webapp"
    assert item["environment"] == "production"
    assert item["message"] == MSG
    assert item["start_timestamp"] == item["timestamp"] == WHEN
    assert item["tags"] == {
        "flux_involved_object_kind": "GitRepository",
        "flux_involved_object_namespace": "gitops-system",
        "flux_involved_object_name": "webapp",
        "flux_reporting_controller": "source-controller",
        "flux_reporting_instance": "source-controller-7f9c",
        "flux_reason": "ReconciliationSucceeded",
        "revision": SAMPLE_REVISION,
        "summary": SUMMARY,
    }
    assert item["contexts"]["trace"]["op"] == "event"
    assert len(item["contexts"]["trace"]["trace_id"]) == 32


CASES: list[ProviderCase] = [
    ProviderCase(
        type="generic",
        spec={},
        secret={"address": "{url}/hook/GENERICSECRET", "headers": "X-Api-Key: generic-canary-header\n"},
        expect=expect_generic,
        canaries=["generic-canary-header", "{url}/hook/GENERICSECRET"],
    ),
    ProviderCase(
        type="generic-hmac",
        spec={"address": "{url}/hook/HMACSECRET"},
        secret={"token": "hmac-canary-key"},
        expect=expect_generic_hmac,
        canaries=["hmac-canary-key"],
    ),
    ProviderCase(
        type="slack",
        spec={"channel": "general"},
        secret={"address": "{url}/services/T0/B0/SLACKHOOKSECRET", "token": "xoxb-canary-slack-token"},
        expect=expect_slack,
        canaries=["xoxb-canary-slack-token", "{url}/services/T0/B0/SLACKHOOKSECRET"],
    ),
    ProviderCase(
        type="discord",
        spec={"username": "flux-bot", "channel": "ignored"},
        secret={"address": "{url}/api/webhooks/123/DISCORDSECRET"},
        expect=expect_discord,
        canaries=["{url}/api/webhooks/123/DISCORDSECRET"],
    ),
    ProviderCase(
        type="rocket",
        spec={"channel": "#ops", "username": "fluxbot"},
        secret={"address": "{url}/hooks/ROCKETSECRET/abc"},
        expect=expect_rocket,
        canaries=["{url}/hooks/ROCKETSECRET/abc"],
    ),
    ProviderCase(
        type="msteams",
        spec={},
        secret={"address": "{url}/workflows/TEAMSSECRET"},
        expect=expect_msteams,
        canaries=["{url}/workflows/TEAMSSECRET"],
    ),
    ProviderCase(
        type="googlechat",
        spec={},
        secret={"address": "{url}/v1/spaces/AAA/messages?key=GCHATKEY&token=GCHATTOKEN"},
        expect=expect_googlechat,
        canaries=["{url}/v1/spaces/AAA/messages?key=GCHATKEY&token=GCHATTOKEN"],
    ),
    ProviderCase(
        type="webex",
        spec={"address": "{url}/v1/messages", "channel": "ROOMID123"},
        secret={"token": "webex-canary-token"},
        expect=expect_webex,
        canaries=["webex-canary-token"],
    ),
    ProviderCase(
        type="telegram",
        # Flux ignores the address: a stale one (nothing listens on port 9) must not receive the token.
        spec={"address": "http://127.0.0.1:9/stale", "channel": "-100123:42"},
        secret={"token": "123456:TELEGRAMCANARY"},
        env={"TELEGRAM_API_BASE_URL": "{url}"},
        expect=expect_telegram,
        canaries=["123456:TELEGRAMCANARY"],
    ),
    ProviderCase(
        type="lark",
        spec={},
        secret={"address": "{url}/open-apis/bot/v2/hook/LARKSECRET"},
        expect=expect_lark,
        canaries=["{url}/open-apis/bot/v2/hook/LARKSECRET"],
    ),
    ProviderCase(
        type="matrix",
        spec={"address": "{url}", "channel": "!room:example.org"},
        secret={"token": "matrix-canary-token"},
        expect=expect_matrix,
        canaries=["matrix-canary-token"],
        final="PUT",
    ),
    ProviderCase(
        type="opsgenie",
        spec={"address": "{url}/v2/alerts"},
        secret={"token": "opsgenie-canary-key"},
        expect=expect_opsgenie,
        canaries=["opsgenie-canary-key"],
    ),
    ProviderCase(
        type="alertmanager",
        spec={"address": "{url}/api/v2/alerts"},
        secret={"token": "am-canary-token"},
        expect=expect_alertmanager,
        canaries=["am-canary-token"],
    ),
    ProviderCase(
        type="grafana",
        spec={"address": "{url}/api/annotations/graphite"},
        secret={"username": "admin", "password": "grafana-canary-pass"},
        expect=expect_grafana,
        canaries=["grafana-canary-pass"],
    ),
    ProviderCase(
        type="pagerduty",
        spec={"address": "{url}/ignored/path", "channel": "pd-routing-key"},
        expect=expect_pagerduty,
        final="POST /v2/change/enqueue$",
    ),
    ProviderCase(
        type="datadog",
        spec={"address": "{url}"},
        secret={"token": "dd-canary-api-key"},
        expect=expect_datadog,
        canaries=["dd-canary-api-key"],
    ),
    ProviderCase(
        type="zulip",
        spec={"address": "{url}/some/path", "channel": "flux/deployments"},
        secret={"username": "bot@zulip.example.com", "password": "zulip-canary-key"},
        expect=expect_zulip,
        canaries=["zulip-canary-key"],
    ),
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
    ProviderCase(
        type="incident.io",
        spec={"address": "{url}/v2/alert_events/http/01ABC"},
        secret={"token": "incident-canary-token"},
        expect=expect_incidentio,
        canaries=["incident-canary-token"],
    ),
    ProviderCase(
        type="sentry",
        spec={"channel": "production"},
        secret={"address": "{scheme}://sentrycanarykey@{host}/42"},
        expect=expect_sentry,
        canaries=["sentrycanarykey"],
    ),
]

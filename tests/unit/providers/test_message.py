"""The message model (issue 12 item 2): chat and incident providers render a ``Message``.

Without a supplied Message every type renders ``Message.of(event)`` and the bytes are Flux's (the
conformance kit pins them); with one (what a template or a group will supply) its title, text and fields
are what the receiver sees.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.core.redact import SecretValue
from notification_controller.providers.base import HTTPNotifier, ProviderOptions
from notification_controller.providers.message import Message
from notification_controller.providers.registry import create_notifier

EVENT = Event.from_raw(
    {
        "involvedObject": {
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": "apps",
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        },
        "severity": "error",
        "timestamp": "2026-11-22T10:00:00Z",
        "message": "health check failed",
        "reason": "HealthCheckFailed",
        "metadata": {"revision": "main@sha1:0c9c2e41", "cluster": "prod-eu"},
        "reportingController": "kustomize-controller",
    }
)
CUSTOM = Message("3 apps failing in prod-eu", "apps, infra, monitoring", "error", (("owner", "team-sre"),))

TYPES: dict[ProviderType, dict[str, Any]] = {
    ProviderType.SLACK: {"address": "https://hooks.slack.com/services/x"},
    ProviderType.DISCORD: {"address": "https://discord.com/api/webhooks/1/x"},
    ProviderType.ROCKET: {"address": "https://rocket.example.com/hooks/x"},
    ProviderType.MSTEAMS: {"address": "https://prod.westeurope.logic.azure.com/workflows/x"},
    ProviderType.GOOGLE_CHAT: {"address": "https://chat.googleapis.com/v1/spaces/x"},
    ProviderType.MATRIX: {
        "address": "https://matrix.example.com",
        "channel": "!room:example.com",
        "token": "t0ken-value",
    },
    ProviderType.LARK: {"address": "https://open.larksuite.com/open-apis/bot/v2/hook/x"},
    ProviderType.WEBEX: {
        "address": "https://webexapis.com/v1/messages",
        "channel": "room",
        "token": "t0ken-value",
    },
    ProviderType.TELEGRAM: {"channel": "@flux", "token": "123:t0ken-value"},
    ProviderType.OPSGENIE: {"address": "https://api.opsgenie.com/v2/alerts", "token": "t0ken-value"},
    ProviderType.INCIDENT_IO: {
        "address": "https://api.incident.io/v2/alert_events/http/x",
        "token": "t0ken-value",
    },
}


OWN_TITLE = {ProviderType.TELEGRAM, ProviderType.OPSGENIE, ProviderType.INCIDENT_IO}
"""Flux titles these its own way (``kind/name/namespace``, ``Kind/name``, ``title: Reason``): they keep it
unless a Message is supplied."""


def notifier(ptype: ProviderType) -> HTTPNotifier:
    spec = dict(TYPES[ptype])
    token = spec.pop("token", "")
    opts = ProviderOptions(
        type=ptype,
        name="p",
        namespace="flux-system",
        uid="5e0c6a1f-aaaa",
        token=SecretValue(token) if token else None,
        **spec,
    )
    built = create_notifier(opts)
    assert isinstance(built, HTTPNotifier)
    return built


def test_default_message_is_fluxs_formatting_and_round_trips() -> None:
    m = Message.of(EVENT)
    assert m.title == "kustomization/apps.flux-system"
    assert (m.text, m.severity) == ("health check failed", "error")
    assert m.fields == (("cluster", "prod-eu"), ("revision", "main@sha1:0c9c2e41"))  # sorted by key
    assert Message.from_json(m.to_json()) == m
    assert Message.from_json(CUSTOM.to_json()) == CUSTOM


@pytest.mark.parametrize("ptype", list(TYPES))
def test_every_chat_and_incident_type_renders_a_supplied_message(ptype: ProviderType) -> None:
    n = notifier(ptype)
    default = n.build_request(EVENT)
    if ptype not in OWN_TITLE:
        assert n.build_request(EVENT, Message.of(EVENT)).body == default.body  # same bytes as Flux's path
    assert b"health check failed" in default.body
    custom = n.build_request(EVENT, CUSTOM).body.decode()
    for text in (CUSTOM.title, CUSTOM.text, "team-sre"):
        assert json.dumps(text)[1:-1] in custom or text.replace("-", "\\\\-") in custom, (ptype, text, custom)
    assert "health check failed" not in custom

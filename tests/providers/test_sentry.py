"""Sentry (an envelope to the DSN's project): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

import json
from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.errors import ProviderConfigError
from notification_controller.providers.sentry import SentryNotifier
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import MSG, SUMMARY, WHEN, construction_error, event, one, opts
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


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
        type="sentry",
        spec={"channel": "production"},
        secret={"address": "{scheme}://sentrycanarykey@{host}/42"},
        expect=expect_sentry,
        canaries=["sentrycanarykey"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "DSN cannot be empty"),
    ],
)
def test_missing_settings_give_fluxs_messages(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1: the construction errors of the type, word for word."""
    assert construction_error(SentryNotifier, ProviderType.SENTRY, **kw) == message


@pytest.mark.parametrize("dsn", ["https://host/42", "ftp://k@host/42", "https://k@host/", "https://k@:1/42"])
def test_invalid_sentry_dsn_never_echoes_it(dsn: str) -> None:
    with pytest.raises(ProviderConfigError) as info:
        SentryNotifier(opts(ProviderType.SENTRY, address=dsn))
    assert str(info.value).startswith("invalid Sentry DSN: ")
    assert dsn not in str(info.value)


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

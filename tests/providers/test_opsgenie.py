"""Opsgenie (alert API with a GenieKey): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.opsgenie import OpsgenieNotifier
from tests.providers.build import PROVIDER_UID, SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import MSG, SUMMARY, assert_json_post, construction_error, event, go, one, opts
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


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


CASES: list[ProviderCase] = [
    ProviderCase(
        type="opsgenie",
        spec={"address": "{url}/v2/alerts"},
        secret={"token": "opsgenie-canary-key"},
        expect=expect_opsgenie,
        canaries=["opsgenie-canary-key"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://api.opsgenie.com/v2/alerts"}, "empty Opsgenie apikey/token"),
    ],
)
def test_missing_settings_give_fluxs_messages(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1: the construction errors of the type, word for word."""
    assert construction_error(OpsgenieNotifier, ProviderType.OPSGENIE, **kw) == message


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

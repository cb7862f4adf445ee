"""incident.io (HTTP alert source): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.incidentio import IncidentIONotifier
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    MSG,
    OBJ,
    SAMPLE_OBJ,
    SAMPLE_UID,
    SUMMARY,
    assert_json_post,
    construction_error,
    event,
    go,
    one,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_incidentio(requests: list[CapturedRequest]) -> None:
    req = one(requests)
    assert req.headers["Authorization"] == "Bearer incident-canary-token"
    body = {
        "title": f"{SAMPLE_OBJ}: ReconciliationSucceeded",
        "status": "resolved",
        "deduplication_key": SAMPLE_UID,
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


CASES: list[ProviderCase] = [
    ProviderCase(
        type="incident.io",
        spec={"address": "{url}/v2/alert_events/http/01ABC"},
        secret={"token": "incident-canary-token"},
        expect=expect_incidentio,
        canaries=["incident-canary-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://api.incident.io/v2/x"}, "empty incident.io API token"),
    ],
)
def test_missing_settings_give_fluxs_messages(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1: the construction errors of the type, word for word."""
    assert construction_error(IncidentIONotifier, ProviderType.INCIDENT_IO, **kw) == message


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

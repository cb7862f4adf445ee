"""Datadog (events API): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

from typing import Any

import pytest

from notification_controller.api.provider import ProviderType
from notification_controller.providers.datadog import DatadogNotifier
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import MSG, WHEN_UNIX, assert_json_post, construction_error, event, go, one, opts
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


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


CASES: list[ProviderCase] = [
    ProviderCase(
        type="datadog",
        spec={"address": "{url}"},
        secret={"token": "dd-canary-api-key"},
        expect=expect_datadog,
        canaries=["dd-canary-api-key"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"address": "https://api.datadoghq.eu"}, "token cannot be empty"),
    ],
)
def test_missing_settings_give_fluxs_messages(kw: dict[str, Any], message: str) -> None:
    """Reference §4.1: the construction errors of the type, word for word."""
    assert construction_error(DatadogNotifier, ProviderType.DATADOG, **kw) == message


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

"""Alertmanager (v2 alerts API): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller.api.provider import ProviderType
from notification_controller.providers.alertmanager import AlertmanagerNotifier, go_title
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    MSG,
    SUMMARY,
    WHEN,
    assert_json_post,
    event,
    go,
    one,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


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


CASES: list[ProviderCase] = [
    ProviderCase(
        type="alertmanager",
        spec={"address": "{url}/api/v2/alerts"},
        secret={"token": "am-canary-token"},
        expect=expect_alertmanager,
        canaries=["am-canary-token"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


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


@given(st.text(max_size=40))
def test_go_title_is_idempotent(text: str) -> None:
    assert go_title(go_title(text)) == go_title(text)

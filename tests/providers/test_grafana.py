"""Grafana (graphite annotations): its conformance case and the pure tests of its request builder."""

from __future__ import annotations

import base64

from notification_controller.api.provider import ProviderType
from notification_controller.providers.grafana import GrafanaNotifier
from tests.providers.case import ProviderCase
from tests.providers.support import (
    OBJ,
    SAMPLE_OBJ,
    SUMMARY,
    WHEN_UNIX,
    assert_json_post,
    event,
    go,
    one,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


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
    assert_json_post(req, "/api/annotations/graphite", {"when": WHEN_UNIX, "text": SAMPLE_OBJ, "tags": tags})


CASES: list[ProviderCase] = [
    ProviderCase(
        type="grafana",
        spec={"address": "{url}/api/annotations/graphite"},
        secret={"username": "admin", "password": "grafana-canary-pass"},
        expect=expect_grafana,
        canaries=["grafana-canary-pass"],
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


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

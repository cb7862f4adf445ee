"""PagerDuty (Events API v2: trigger/resolve plus change events): its conformance case and the pure tests of
its request builder.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from notification_controller.api.event import Event
from notification_controller.api.provider import ProviderType
from notification_controller.providers.pagerduty import PagerDutyNotifier
from tests.providers.build import SAMPLE_REVISION
from tests.providers.case import ProviderCase
from tests.providers.support import (
    MSG,
    SAMPLE_UID,
    SUMMARY,
    WHEN,
    assert_json_post,
    event,
    go,
    opts,
)
from tests.support.capture import CapturedRequest

# ---- conformance case ----------------------------------------------------------------------------


def expect_pagerduty(requests: list[CapturedRequest]) -> None:
    assert [r.path for r in requests] == ["/v2/enqueue", "/v2/change/enqueue"]
    assert_json_post(
        requests[0],
        "/v2/enqueue",
        {"routing_key": "pd-routing-key", "event_action": "resolve", "dedup_key": SAMPLE_UID},
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


CASES: list[ProviderCase] = [
    ProviderCase(
        type="pagerduty",
        spec={"address": "{url}/ignored/path", "channel": "pd-routing-key"},
        expect=expect_pagerduty,
        final="POST /v2/change/enqueue$",
    ),
]

# ---- the builder ---------------------------------------------------------------------------------


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

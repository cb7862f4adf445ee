"""The per-Provider last success / failure tracker (dispatch/providerhealth.py) and the Reporter that feeds it.

Pure: an injected clock, the real Reporter with a real metrics registry; no fakes of the code under test.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from notification_controller.api.alert import Alert
from notification_controller.api.event import Event
from notification_controller.core.redact import Redactor
from notification_controller.dispatch.model import Notification, Ref, new_id
from notification_controller.dispatch.providerhealth import MAX_ERROR, ProviderHealth, ProviderState
from notification_controller.dispatch.report import Reporter
from notification_controller.metrics import EventMetrics
from tests.support.sinks import LogSink

NS = "flux-system"


class Ticks:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_success_and_failure_are_remembered_apart() -> None:
    clock = Ticks()
    health = ProviderHealth(now=clock)
    assert health.get("a/slack") is None
    health.success("a/slack")
    clock.now = 1010.0
    health.failure("a/slack", "503 Service Unavailable")
    clock.now = 1020.0
    health.success("a/slack")  # a later success keeps the failure's time and error: both are shown
    assert health.get("a/slack") == ProviderState(1020.0, 1010.0, "503 Service Unavailable")


def test_errors_are_cut_and_copies_do_not_change_underneath() -> None:
    health = ProviderHealth(now=Ticks())
    health.failure("a/slack", "x" * (MAX_ERROR * 10))
    state = health.get("a/slack")
    assert state is not None and len(state.last_error) == MAX_ERROR
    health.failure("a/slack", "later")
    assert len(state.last_error) == MAX_ERROR  # the copy handed out kept its value


def test_bounded_by_the_cap_oldest_out_and_forgotten_with_the_provider() -> None:
    health = ProviderHealth(now=Ticks(), max_providers=3)
    for n in range(10):
        health.success(f"ns/p{n}")
    assert len(health) == 3
    assert health.get("ns/p0") is None and health.get("ns/p9") is not None
    health.forget("ns/p9")
    health.forget("ns/never")  # nothing to forget: no error
    assert health.get("ns/p9") is None and len(health) == 2


def _alert() -> Alert:
    return Alert.model_validate(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": "on-call", "namespace": NS},
            "spec": {
                "providerRef": {"name": "slack"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
            },
        }
    )


def _notification() -> Notification:
    event = Event.model_validate(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": NS, "name": "apps"},
            "severity": "error",
            "message": "m",
            "reason": "R",
            "reportingController": "kc",
        }
    )
    return Notification(new_id(), event, Ref(NS, "on-call"), Ref(NS, "slack"), "slack")


async def test_the_reporter_feeds_it_with_the_masked_error_and_forgets_a_deleted_provider() -> None:
    redactor = Redactor()
    redactor.set_secret((NS, "slack-token"), {"token": b"canary-s3cret-value"})
    report = Reporter(LogSink(), EventMetrics(CollectorRegistry()), redactor)
    notification = _notification()
    report.failed(notification, _alert(), "401 from https://x/?token=canary-s3cret-value", "unauthorized")
    state = report.health.get(f"{NS}/slack")
    assert state is not None and state.last_failure is not None and state.last_success is None
    assert "canary-s3cret-value" not in state.last_error and "401 from" in state.last_error
    report.delivered(notification)
    state = report.health.get(f"{NS}/slack")
    assert state is not None and state.last_success is not None
    report.forget_provider(NS, "slack")
    assert report.health.get(f"{NS}/slack") is None
    await report.idle()  # the Warning Event's task

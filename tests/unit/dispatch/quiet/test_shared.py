"""What the quiet stages share: a flood writes at most one Warning per Alert every five minutes and asks for
at most one status refresh per Alert every ten seconds (a summary forces one); a store outage is counted."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from notification_controller.api.alert import Alert
from notification_controller.dispatch.quiet.shared import STATUS_INTERVAL, WARN_INTERVAL, QuietState
from notification_controller.errors import StoreError
from notification_controller.lib.clock import ManualClock
from notification_controller.metrics import NoiseMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.store.memory import MemoryStore
from tests.unit.dispatch.quiet.test_silences import alert


def test_warnings_and_status_refreshes_are_rate_limited_per_alert() -> None:
    clock = ManualClock()
    warned: list[str] = []
    touched: list[str] = []
    registry = CollectorRegistry()
    state = QuietState(
        MemoryStore(clock=clock),
        ObjectStore(),
        clock,
        warn=lambda a, reason, message: warned.append(a.metadata.name),
        metrics=NoiseMetrics(registry),
        touched=lambda a: touched.append(a.metadata.name),
    )
    a, b = alert("a"), alert("b")
    for _ in range(1000):
        state.limited(a, "silence", "silence_limit", "too many")
        state.held_for(a)
    state.limited(b, "silence", "silence_limit", "too many")
    state.held_for(b)
    assert warned == ["a", "b"] and touched == ["a", "b"]
    state.held_for(a, force=True)  # a summary went out: the status follows at once
    assert touched == ["a", "b", "a"]
    clock.advance(STATUS_INTERVAL)
    state.held_for(a)
    assert touched[-1] == "a" and len(touched) == 4
    clock.advance(WARN_INTERVAL)
    state.limited(a, "silence", "silence_limit", "too many")
    assert warned == ["a", "b", "a"]
    untracked = {"stage": "silence", "reason": "silence_limit"}
    assert registry.get_sample_value("notification_noise_untracked_total", untracked) == 1002
    state.store_failed("window", StoreError("down"))
    assert state.store_errors == 1
    errors = {"stage": "window", "reason": "store_error"}
    assert registry.get_sample_value("notification_noise_untracked_total", errors) == 1


def test_without_a_status_callback_nothing_is_asked() -> None:
    clock = ManualClock()
    state = QuietState(MemoryStore(clock=clock), ObjectStore(), clock)
    one: Alert = alert()
    state.held_for(one, force=True)  # no reconciler wired (explain, tests): a no-op

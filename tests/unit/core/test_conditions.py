"""``core.conditions``: transition times and readiness as Flux's runtime computes them."""

from __future__ import annotations

from datetime import UTC, datetime

from notification_controller.api.common import ConditionStatus
from notification_controller.core import conditions


def test_condition_transition_time_changes_only_on_change() -> None:
    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    conds = conditions.set_condition(
        [], "Ready", ConditionStatus.TRUE, "Succeeded", "ok", generation=1, now=t0
    )
    same = conditions.set_condition(
        conds, "Ready", ConditionStatus.TRUE, "Succeeded", "ok", generation=2, now=t1
    )
    assert same[0].last_transition_time == t0 and same[0].observed_generation == 2
    changed = conditions.set_condition(
        same, "Ready", ConditionStatus.FALSE, "Failed", "no", generation=2, now=t1
    )
    assert changed[0].last_transition_time == t1
    ordered = conditions.set_condition(
        changed, "Reconciling", ConditionStatus.TRUE, "Progressing", "", generation=2, now=t1
    )
    assert [c.type for c in ordered] == ["Reconciling", "Ready"]


def test_is_ready_like_flux_runtime() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ready = conditions.set_condition(
        [], "Ready", ConditionStatus.TRUE, "Succeeded", "", generation=1, now=now
    )
    assert conditions.is_ready(ready)
    reconciling = conditions.set_condition(
        ready, "Reconciling", ConditionStatus.TRUE, "Progressing", "", generation=1, now=now
    )
    assert not conditions.is_ready(reconciling)

"""Noise control (issue 14): the pure decisions (``core/noise.py``), then the stages (``dispatch/noise/``)
over the real in-memory state store and a manual clock (virtual time: windows pass in microseconds).

The stages run in their documented order (filter → threshold → state change → repeat → group) through
``run``, the same loop the dispatcher applies to its pre-queue list.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from notification_controller.api.alert import Alert
from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.api.provider import Provider
from notification_controller.core.noise import (
    MAX_GROUP_OBJECTS,
    MAX_GROUP_SAMPLES,
    OCCURRENCES,
    RECOVERED_FROM,
    Arrivals,
    Group,
    ObjectState,
    Slots,
    digest,
    group_labels,
    identity,
    legacy_group_index,
    normalise_message,
    state_step,
    threshold_step,
)
from notification_controller.dispatch.model import Draft, Drop, Notification
from notification_controller.dispatch.noise import SCAN_PER_TICK, NoiseControl, flush
from notification_controller.errors import StoreError
from notification_controller.lib.clock import ManualClock
from notification_controller.metrics import NoiseMetrics
from notification_controller.objects.base import ObjectStore
from notification_controller.settings import NoiseControlSettings
from notification_controller.store.base import KVEntry
from notification_controller.store.memory import MemoryStore

NS = "flux-system"


def event(
    name: str = "app", severity: str = "info", message: str = "ok", reason: str = "Progressing", **md: str
) -> Event:
    return Event.from_raw(
        {
            "involvedObject": {"kind": "Kustomization", "namespace": NS, "name": name},
            "severity": severity,
            "message": message,
            "reason": reason,
            "metadata": md,
            "reportingController": "kustomize-controller",
        }
    )


def alert(**spec: Any) -> Alert:
    obj = parse_object(
        {
            "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
            "kind": "Alert",
            "metadata": {"name": "noisy", "namespace": NS, "generation": 1},
            "spec": {
                "providerRef": {"name": "sink"},
                "eventSources": [{"kind": "Kustomization", "name": "*"}],
                **spec,
            },
        }
    )
    assert isinstance(obj, Alert)
    return obj


_PROVIDER = parse_object(
    {
        "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
        "kind": "Provider",
        "metadata": {"name": "sink", "namespace": NS, "generation": 1, "uid": "0b7c-1"},
        "spec": {"type": "generic", "address": "http://127.0.0.1:1/hook"},
    }
)
assert isinstance(_PROVIDER, Provider)
PROVIDER: Provider = _PROVIDER


# ---- pure decisions -------------------------------------------------------------------------------------
def test_normalise_masks_durations_timestamps_and_ids_only() -> None:
    a = normalise_message("Health check failed after 2m0.012s: timeout waiting for Deployment/app (in 2.08s)")
    b = normalise_message("Health check failed after 2m1.5s: timeout waiting for Deployment/app (in 310ms)")
    assert a == b
    assert "Deployment/app" in a and "<duration>" in a
    assert normalise_message("next run in 10m0s at 2026-11-22T10:00:00Z") == normalise_message(
        "next run in 5m at 2026-11-23T11:12:13.5+01:00"
    )
    # what distinguishes two failures stays: other words, other objects, small numbers
    assert normalise_message("3 replicas unavailable") != normalise_message("4 replicas unavailable")
    assert normalise_message("failed for app-a") != normalise_message("failed for app-b")


@given(st.text(max_size=200))
def test_normalise_is_idempotent(text: str) -> None:
    once = normalise_message(text)
    assert normalise_message(once) == once


def test_identity_ignores_durations_but_not_reason_severity_or_object() -> None:
    base = identity(event(message="failed in 2.1s", severity="error", reason="HealthCheckFailed"))
    assert base == identity(event(message="failed in 9s", severity="error", reason="HealthCheckFailed"))
    assert base != identity(event(message="failed in 2.1s", severity="info", reason="HealthCheckFailed"))
    assert base != identity(event(message="failed in 2.1s", severity="error", reason="Other"))
    assert base != identity(
        event(name="other", message="failed in 2.1s", severity="error", reason="HealthCheckFailed")
    )


def test_threshold_fires_on_the_nth_event_within_the_window_then_restarts() -> None:
    state: Arrivals | None = None
    sends = []
    for t in (0, 10, 20, 30, 40, 50):  # count 3 within 60 s
        d = threshold_step(state, float(t), 3, 60.0)
        state = d.state
        sends.append((d.send, d.seen))
    assert sends == [(False, 1), (False, 2), (True, 3), (False, 1), (False, 2), (True, 3)]
    # arrivals older than the window do not count
    d1 = threshold_step(None, 0.0, 2, 60.0)
    d2 = threshold_step(d1.state, 61.0, 2, 60.0)
    assert not d2.send and d2.seen == 1
    assert threshold_step(None, 0.0, 1, 60.0).send  # count 1: every event


@given(st.lists(st.floats(min_value=0, max_value=1000), max_size=60), st.integers(1, 10), st.floats(1, 100))
def test_threshold_state_is_bounded_and_fires_only_with_count_in_window(
    gaps: list[float], count: int, within: float
) -> None:
    state: Arrivals | None = None
    now = 0.0
    for gap in gaps:
        now += gap
        before = [t for t in (state.times if state else ()) if now - t < within]
        d = threshold_step(state, now, count, within)
        assert len(d.state.times) <= max(0, count - 1)
        assert d.send == (len(before) + 1 >= count)
        assert Arrivals.from_bytes(d.state.to_bytes()) == d.state
        state = d.state


def test_state_change_sends_first_error_and_recovery_only() -> None:
    ok, err = (
        event(severity="info"),
        event(severity="error", reason="HealthCheckFailed", message="boom\nmore"),
    )
    assert not state_step(None, ok, 0).send  # never notified: healthy; an info is not news
    first = state_step(None, err, 10)
    assert first.send and first.state == ObjectState(True, "HealthCheckFailed", "boom", 10)
    assert not state_step(first.state, err, 20).send
    recovery = state_step(first.state, ok, 70)
    assert recovery.send and recovery.recovered_from == first.state and recovery.state is not None
    assert not recovery.state.failing
    assert ObjectState.from_bytes(first.state.to_bytes()) == first.state


def test_group_labels_read_the_listed_fields() -> None:
    e = event(reason="HealthCheckFailed", severity="error", revision="main@sha1:abc")
    assert group_labels(e, ["reason", "metadata.revision", "involvedObject.kind", "metadata.missing"]) == (
        ("reason", "HealthCheckFailed"),
        ("metadata.revision", "main@sha1:abc"),
        ("involvedObject.kind", "Kustomization"),
        ("metadata.missing", ""),
    )


def test_group_batches_wait_then_interval_and_ends_when_quiet() -> None:
    g = Group((("reason", "HealthCheckFailed"),), created=0.0)
    g = g.add(event("a", "error", "a failed"), b"tpl", 0.0, wait=30, interval=300)
    assert g.due == 30.0 and not g.is_due(29) and g.is_due(30)
    g = g.add(event("b", "info", "b ok"), b"tpl2", 5.0, wait=30, interval=300)
    assert g.count == 2 and g.failing and g.template == b"tpl"  # the batch's first event names it
    rendered = g.event()
    assert rendered.severity == "error" and rendered.metadata[OCCURRENCES] == "2"
    assert "kustomization/a.flux-system: a failed" in rendered.message
    assert g.title() == "2 events from 2 objects (reason=HealthCheckFailed)"
    flushed = g.flushed(30.0)
    assert flushed.count == 0 and flushed.due is None and flushed.seq == 1
    assert not flushed.ended(100.0, 300) and flushed.ended(330.0, 300)
    # an event after the flush waits for the interval, not for groupWait
    later = flushed.add(event("c"), b"tpl3", 40.0, wait=30, interval=300)
    assert later.due == 330.0
    assert Group.from_bytes(later.to_bytes()) == later
    assert Slots.from_bytes(Slots(3, 9).to_bytes()) == Slots(3, 9)


def test_a_flood_of_distinct_objects_keeps_a_group_bounded() -> None:
    g = Group((), created=0.0)
    for i in range(100_000):
        g = g.add(event(f"app{i}", "error", "x" * 500), b"t", float(i) / 1000, wait=30, interval=300)
    assert g.count == 100_000
    assert len(g.objects) == MAX_GROUP_OBJECTS and len(g.samples) == MAX_GROUP_SAMPLES
    assert len(g.to_bytes()) < 8_000
    assert "…and 99995 more" in g.text()


# ---- the stages over the real memory store ----------------------------------------------------------------
class Rig:
    def __init__(self, settings: NoiseControlSettings | None = None) -> None:
        self.clock = ManualClock()
        self.state = MemoryStore(clock=self.clock)
        self.objects = ObjectStore()
        self.queued: list[Notification] = []
        self.warnings: list[tuple[str, str]] = []
        self.registry = CollectorRegistry()
        self.noise = NoiseControl(
            self.state,
            self.objects,
            self.clock,
            settings,
            warn=lambda a, r, m: self.warnings.append((r, m)),
            metrics=NoiseMetrics(self.registry),
        )

    def metric(self, name: str, **labels: str) -> float:
        """The sample of ``name`` with exactly ``labels`` (0 when absent)."""
        value = self.registry.get_sample_value(name, labels)
        return value if value is not None else 0.0

    async def _enqueue(self, n: Notification) -> None:
        self.queued.append(n)

    async def run(self, a: Alert, e: Event) -> Draft | Drop:
        """The pre-queue loop of the dispatcher, over the noise stages only."""
        draft: Draft = Draft(e, a, PROVIDER)
        for stage in self.noise.pre_queue():
            result = stage(draft)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, Drop):
                return result
            draft = result
        return draft

    async def sent(self, a: Alert, events: list[tuple[float, Event]]) -> list[Draft | Drop]:
        out = []
        for gap, e in events:
            self.clock.advance(gap)
            out.append(await self.run(a, e))
        return out


@pytest.fixture
def rig() -> Rig:
    return Rig()


def reasons(results: list[Draft | Drop]) -> list[str]:
    return ["sent" if isinstance(r, Draft) else str(r.reason) for r in results]


async def test_a_flux_alert_passes_untouched_and_synchronously(rig: Rig) -> None:
    plain = alert()
    draft = Draft(event(), plain, PROVIDER)
    for stage in rig.noise.pre_queue():
        assert stage(draft) is draft  # no awaitable, no copy: Flux's path costs nothing


async def test_filter_on_reason(rig: Rig) -> None:
    a = alert(filter="event.reason in ['HealthCheckFailed']")
    results = [await rig.run(a, event(reason=r)) for r in ("HealthCheckFailed", "Progressing")]
    assert reasons(results) == ["sent", "filter"]
    assert isinstance(results[1], Drop) and results[1].suppressed


async def test_filter_that_fails_to_evaluate_notifies_and_warns(rig: Rig) -> None:
    a = alert(filter="event.metadata.team == 'a'")  # no such key on this event: an evaluation error
    assert reasons([await rig.run(a, event())]) == ["sent"]
    assert rig.warnings and rig.warnings[0][0] == "FilterFailed"


async def test_threshold_counts_per_object_and_says_how_many(rig: Rig) -> None:
    a = alert(threshold={"count": 3, "within": "10m"})
    results = await rig.sent(
        a, [(0, event("a")), (60, event("b")), (60, event("a")), (60, event("a")), (60, event("b"))]
    )
    assert reasons(results) == ["threshold", "threshold", "threshold", "sent", "threshold"]
    fired = results[3]
    assert isinstance(fired, Draft) and fired.event.metadata[OCCURRENCES] == "3 within 10m0s"
    # the window slides: 3 events spread over more than 10 minutes never fire
    rig2 = Rig()
    assert "sent" not in reasons(await rig2.sent(a, [(0, event()), (400, event()), (400, event())]))


async def test_state_change_first_error_then_recovery_with_what_recovered(rig: Rig) -> None:
    a = alert(notifyOn="StateChange")
    err = event(severity="error", reason="HealthCheckFailed", message="timeout after 2m")
    results = await rig.sent(
        a, [(0, event()), (1, err), (1, err), (120, event(message="applied")), (1, event())]
    )
    assert reasons(results) == ["state", "sent", "state", "sent", "state"]
    recovery = results[3]
    assert isinstance(recovery, Draft) and recovery.message is not None
    assert recovery.message.title.startswith("Recovered: kustomization/app")
    assert recovery.event.metadata[RECOVERED_FROM].startswith("HealthCheckFailed: timeout after 2m")


async def test_repeat_interval_suppresses_identical_notifications(rig: Rig) -> None:
    a = alert(repeatInterval="1h")
    same = [event(message=f"Health check failed after {s}s", severity="error") for s in (2.1, 3.7, 1.2)]
    results = await rig.sent(
        a, [(0, same[0]), (600, same[1]), (600, event(message="other")), (3000, same[2])]
    )
    assert reasons(results) == ["sent", "repeat", "sent", "sent"]  # the last one: the hour has passed


async def test_group_collects_then_flushes_one_notification(rig: Rig) -> None:
    a = alert(groupBy=["reason"], groupWait="30s", groupInterval="5m")
    rig.objects.upsert(a)
    results = await rig.sent(
        a,
        [
            (0, event("a", "error", "a broke", "HealthCheckFailed")),
            (5, event("b", "error", "b broke", "HealthCheckFailed")),
        ],
    )
    results.append(await rig.run(a, event("c", "info", "c ok", "Progressing")))  # another group
    assert reasons(results) == ["grouped"] * 3
    rig.clock.advance(10)
    assert await rig.noise.flush_due(rig._enqueue) == 0  # 15 s < groupWait
    rig.clock.advance(20)
    assert await rig.noise.flush_due(rig._enqueue) == 2
    by_reason = {n.event.reason: n for n in rig.queued}
    failing = by_reason["HealthCheckFailed"]
    assert (
        failing.message is not None
        and failing.message.title == "2 events from 2 objects (reason=HealthCheckFailed)"
    )
    assert failing.event.metadata[OCCURRENCES] == "2" and failing.event.severity == "error"
    assert failing.alert.name == "noisy" and failing.provider.name == "sink"
    # a new event of a flushed group waits for groupInterval after that flush
    rig.queued.clear()
    await rig.run(a, event("a", "error", "again", "HealthCheckFailed"))
    rig.clock.advance(60)
    assert await rig.noise.flush_due(rig._enqueue) == 0
    rig.clock.advance(240)
    assert await rig.noise.flush_due(rig._enqueue) == 1 and rig.queued[0].id.endswith("-1")
    # quiet for an interval: the groups end, nothing is scheduled or counted for them any more
    rig.clock.advance(301)
    await rig.noise.flush_due(rig._enqueue)
    assert rig.metric("notification_noise_keys", kind="groups") == 0
    assert not rig.noise.flusher._flush_at
    assert await rig.noise.flush_due(rig._enqueue) == 0


async def test_stages_combine_in_the_documented_order(rig: Rig) -> None:
    """filter → threshold → state change → repeat: only failing events of one reason count; the second
    failure within the window notifies once (the state is now 'failing'), repeats are suppressed by state."""
    a = alert(
        filter="event.reason != 'Progressing'",
        threshold={"count": 2, "within": "10m"},
        notifyOn="StateChange",
        repeatInterval="1h",
    )
    err = event(severity="error", reason="HealthCheckFailed", message="down")
    results = await rig.sent(
        a,
        [
            (0, event(reason="Progressing")),
            (1, err),
            (1, err),
            (1, err),
            (1, err),
            (1, event(reason="Ready")),
            (1, event(reason="Ready")),
        ],
    )
    assert reasons(results) == ["filter", "threshold", "sent", "threshold", "state", "threshold", "sent"]
    recovery = results[-1]
    assert isinstance(recovery, Draft) and RECOVERED_FROM in recovery.event.metadata
    assert OCCURRENCES in recovery.event.metadata  # the threshold's count travels to the recovery


class BrokenStore(MemoryStore):
    async def kv_get(self, key: str) -> Any:
        raise StoreError("store down")

    async def seen(self, key: str, ttl: float) -> bool:
        raise StoreError("store down")


async def test_a_store_outage_lets_notifications_through(rig: Rig) -> None:
    rig.noise.core.state = BrokenStore(clock=rig.clock)
    specs: list[dict[str, Any]] = [
        {"threshold": {"count": 5, "within": "1m"}},
        {"notifyOn": "StateChange"},
        {"repeatInterval": "1h"},
        {"groupBy": []},
    ]
    for spec in specs:
        assert reasons([await rig.run(alert(**spec), event())]) == ["sent"], spec
    assert rig.noise.store_errors == 4

    assert rig.metric("notification_noise_untracked_total", stage="repeat", reason="store_error") == 1


# ---- bounded state (issue 23 item 5) ----------------------------------------------------------------------
def test_values_are_packed_and_earlier_json_still_reads() -> None:
    arrivals = Arrivals((1_700_000_000.25, 1_700_000_001.5))
    assert len(arrivals.to_bytes()) == 17 and Arrivals.from_bytes(arrivals.to_bytes()) == arrivals
    state = ObjectState(True, "HealthCheckFailed", "timeout – 2m", 1_700_000_000.0)
    assert ObjectState.from_bytes(state.to_bytes()) == state
    assert len(state.to_bytes()) < 50
    # what an earlier version left in a SQLite file or a NATS bucket
    assert Arrivals.from_bytes(b'{"t":[1.0,2.5]}') == Arrivals((1.0, 2.5))
    old = b'{"f":true,"r":"Failed","m":"boom","s":12.0}'
    assert ObjectState.from_bytes(old) == ObjectState(True, "Failed", "boom", 12.0)


def test_json_values_are_sized_to_their_content() -> None:
    g = Group((("reason", "x"),), created=0.0).add(event(), b"{}", 0.0, wait=30, interval=300)
    value = g.to_bytes()
    assert sys.getsizeof(value) < len(value) + 64  # orjson's own bytes object carries a 4 KiB buffer


async def test_state_change_keys_expire_after_the_retention() -> None:
    rig = Rig(NoiseControlSettings(state_retention=3600))
    a = alert(notifyOn="StateChange")
    err = event(severity="error", reason="HealthCheckFailed")
    assert reasons(await rig.sent(a, [(0, err), (1800, err)])) == ["sent", "state"]
    rig.clock.advance(3601)
    # forgotten, as after a restart with the memory store: the failure notifies again, a recovery would not
    assert reasons(await rig.sent(a, [(0, err)])) == ["sent"]
    rig.clock.advance(3601)
    assert reasons(await rig.sent(a, [(0, event())])) == ["state"]
    assert rig.state.keys() == 0 and rig.metric("notification_noise_keys", kind="keys") == 0


async def test_past_the_key_cap_events_are_notified_counted_and_warned_once() -> None:
    rig = Rig(NoiseControlSettings(max_keys_per_alert=2))
    counted = alert(threshold={"count": 3, "within": "10m"})
    results = await rig.sent(counted, [(0, event(n)) for n in ("a", "b", "c", "d", "a", "a")])
    assert reasons(results) == ["threshold", "threshold", "sent", "sent", "threshold", "sent"]
    fired = results[-1]
    assert isinstance(fired, Draft) and fired.event.metadata[OCCURRENCES] == "3 within 10m0s"
    assert rig.metric("notification_noise_untracked_total", stage="threshold", reason="key_limit") == 2
    assert [r for r, _ in rig.warnings] == ["NoiseControlLimitReached"]
    assert "--noise-max-keys-per-alert" in rig.warnings[0][1]
    # a state change needs no key for a healthy object never notified: still suppressed when full
    changes = alert(notifyOn="StateChange")
    rig2 = Rig(NoiseControlSettings(max_keys_per_alert=1))
    results = await rig2.sent(
        changes, [(0, event("a", "error")), (0, event("b")), (0, event("c", "error")), (0, event("a"))]
    )
    assert reasons(results) == ["sent", "state", "sent", "sent"]  # c: untracked; a: its recovery
    assert rig2.metric("notification_noise_untracked_total", stage="state", reason="key_limit") == 1
    # the key cap frees up as keys expire
    rig.clock.advance(601)
    assert reasons(await rig.sent(counted, [(0, event("e"))])) == ["threshold"]


async def test_past_the_group_cap_events_go_out_ungrouped() -> None:
    rig = Rig(NoiseControlSettings(max_groups_per_alert=2))
    a = alert(groupBy=["metadata.team"], groupWait="30s")
    rig.objects.upsert(a)
    teams = [event(f"o{i}", "error", team=f"t{i % 4}") for i in range(8)]
    assert reasons(await rig.sent(a, [(0, e) for e in teams])) == ["grouped", "grouped", "sent", "sent"] * 2
    assert rig.metric("notification_noise_untracked_total", stage="group", reason="group_limit") == 4
    rig.clock.advance(30)
    assert await rig.noise.flush_due(rig._enqueue) == 2
    assert sorted(n.event.metadata[OCCURRENCES] for n in rig.queued) == ["2", "2"]


async def test_a_durable_stores_open_groups_are_found_by_another_process() -> None:
    """Two NoiseControls over one store stand for a restart (or a second replica): the new one has not
    seen the group, reads the Alert's slots, and flushes it once; expired slots move ``lo`` on."""
    first = Rig()
    first.state.durable = True  # the slot listing is only written for stores other processes share
    a = alert(groupBy=["reason"], groupWait="30s", groupInterval="1m")
    first.objects.upsert(a)
    await first.run(a, event("a", "error", reason="Failed"))
    await first.run(a, event("b", "error", reason="Failed"))
    second = NoiseControl(first.state, first.objects, first.clock)
    first.clock.advance(30)
    assert await second.flush_due(first._enqueue) == 1
    assert first.queued[0].event.metadata[OCCURRENCES] == "2"
    assert await first.noise.flush_due(first._enqueue) == 0, "already flushed by the other process"
    slots_key = flush.slots_key("flux-system/noisy")
    entry = await first.state.kv_get(slots_key)
    assert entry is not None and Slots.from_bytes(entry.value) == Slots(0, 64)  # a block of 64 reserved
    # the group ends, its slot expires; the next scan moves past it
    first.clock.advance(300)
    await first.run(a, event("c", "error", reason="Other"))
    third = NoiseControl(first.state, first.objects, first.clock)
    await third.flush_due(first._enqueue)
    entry = await first.state.kv_get(slots_key)
    assert entry is not None and Slots.from_bytes(entry.value) == Slots(1, 64)  # slot 0 expired


async def test_threshold_and_state_change_feed_a_group(rig: Rig) -> None:
    """threshold → state change → group: only the threshold's firing, state-changing events are grouped."""
    a = alert(threshold={"count": 2, "within": "10m"}, notifyOn="StateChange", groupBy=[], groupWait="10s")
    rig.objects.upsert(a)
    err = {name: event(name, "error", f"{name} down", "HealthCheckFailed") for name in ("a", "b", "c")}
    results = await rig.sent(a, [(0, err["a"]), (1, err["b"]), (1, err["a"]), (1, err["b"]), (1, err["c"])])
    assert reasons(results) == ["threshold", "threshold", "grouped", "grouped", "threshold"]
    rig.clock.advance(10)
    assert await rig.noise.flush_due(rig._enqueue) == 1
    [group] = rig.queued
    assert group.event.metadata[OCCURRENCES] == "2" and group.message is not None
    assert group.message.title == "2 events from 2 objects"
    # the same failures again: the threshold fires, the state change holds them back, nothing is grouped
    again = await rig.sent(a, [(1, err["a"]), (1, err["a"])])
    assert reasons(again) == ["threshold", "state"]


def test_the_controller_checks_what_the_crd_checks() -> None:
    """Local mode has no schema: the Alert's own validation refuses what the CRD would (Ready=False)."""
    bad = alert(
        repeatInterval="1 hour",
        threshold={"count": 0, "within": "0s"},
        groupBy=["involvedObject.uid"],
        filter="x" * 5000,
    ).spec.validation_errors()
    assert bad == [
        "spec.repeatInterval '1 hour' is not a duration (e.g. '30s', '5m', '1h')",
        "spec.threshold.within must be longer than 0s",
        "spec.threshold.count must be between 1 and 1000",
        "spec.groupBy[0] is not one of involvedObject.kind, involvedObject.namespace, involvedObject.name, "
        "reason, severity, metadata.<key>",
        "spec.filter is longer than 4096 characters",
    ]
    assert alert(groupWait="10s").spec.validation_errors() == [
        "spec.groupWait and spec.groupInterval need spec.groupBy"
    ]
    assert (
        alert(**{"groupBy": ["reason", "metadata.revision"], "groupWait": "0s"}).spec.validation_errors()
        == []
    )
    assert not alert().spec.noisy and alert(notifyOn="Always").spec.noisy is False


async def test_an_upgrade_flushes_the_groups_of_the_old_index_and_expires_it() -> None:
    """Versions before issue 23 listed an Alert's groups in one index value without TTL."""
    rig = Rig()
    a = alert(groupBy=["reason"], groupWait="30s")
    rig.objects.upsert(a)
    await rig.run(a, event("a", "error", reason="Failed"))  # not durable yet: no slot, as before
    [key] = rig.noise.flusher._flush_at.at
    rig.state.durable = True
    legacy_key = "noise/groups/" + digest("flux-system/noisy")
    await rig.state.kv_put(legacy_key, orjson.dumps([key, "noise/group/gone"]))
    upgraded = NoiseControl(rig.state, rig.objects, rig.clock)
    rig.clock.advance(30)
    assert await upgraded.flush_due(rig._enqueue) == 1
    assert rig.queued[0].event.metadata[OCCURRENCES] == "1"
    rig.clock.advance(31)
    assert await rig.state.kv_get(legacy_key) is None
    assert legacy_group_index(b"not json") == [] and legacy_group_index(b'{"a": 1}') == []


class CountingStore(MemoryStore):
    durable = True  # as SQLite or NATS: groups are listed in slots
    reads = 0

    async def kv_get(self, key: str) -> KVEntry | None:
        self.reads += 1
        return await super().kv_get(key)


async def test_reading_the_slots_is_spread_over_ticks() -> None:
    """Another process's 1,000 open groups are found a bounded number of reads per tick at a time."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    rig = Rig()
    rig.state, rig.clock = store, clock
    rig.noise = NoiseControl(store, rig.objects, clock, NoiseControlSettings(max_groups_per_alert=5000))
    a = alert(groupBy=["metadata.team"], groupWait="10m")
    rig.objects.upsert(a)
    for i in range(1000):
        await rig.run(a, event(f"o{i}", "error", team=f"t{i}"))
    other = NoiseControl(store, rig.objects, clock)
    per_tick: list[int] = []
    while not per_tick or per_tick[-1]:  # until a tick reads nothing: every slot read, the next pass later
        store.reads = 0
        await other.flush_due(rig._enqueue)
        per_tick.append(store.reads)
        assert len(per_tick) < 20
    assert len(other.flusher._flush_at) == 1000, "every group of the other process found"
    assert max(per_tick) <= 2 * SCAN_PER_TICK + 2 and len(per_tick) > 1000 // SCAN_PER_TICK

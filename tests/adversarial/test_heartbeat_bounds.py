"""Heartbeats (Alert ``spec.heartbeat``) are tenant-controlled: what a tenant with many Alerts can cost.

A tenant who may create Alerts may give each a heartbeat at the minimum interval (1m). Bounded here:

* beats: at most one per Alert per interval (the interval's minimum is enforced; a shorter one never beats);
* the scheduler's time: an idle tick (nothing due, nothing changed) is a comparison, whatever the number of
  Alerts; a full scan happens when an Alert or Provider changes or a beat is due. Measured before the
  schedule was remembered: 35 ms per one-second tick for 5,000 heartbeat Alerts beside 5,000 others (3.5% of a
  core, for ever); after: one scan per beat round (~20 ms) and ~0.01 ms per idle tick;
* the scheduler's memory: what it remembers per Alert goes with the Alert (deletion, suspension).

Runs ``Heartbeats`` on a real ``MemoryStore`` and ``ObjectStore`` with a ``ManualClock`` (time is injected; the
CPU bounds are generous multiples of what was measured on a shared two-core machine).
"""

from __future__ import annotations

import time
from typing import Any

from notification_controller.api.objects import parse_object
from notification_controller.dispatch.heartbeat import Heartbeats
from notification_controller.dispatch.model import Notification
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import ObjectStore
from notification_controller.store.memory import MemoryStore
from tests.unit.dispatch.test_heartbeat import NS, alert_doc, provider_doc

ALERTS = 3000


def rig(**heartbeat: Any) -> tuple[ManualClock, ObjectStore, Heartbeats, list[Notification]]:
    clock = ManualClock()
    objects = ObjectStore()
    objects.upsert(parse_object(provider_doc()))
    for i in range(ALERTS):
        objects.upsert(parse_object(alert_doc(f"beat-{i}", heartbeat=heartbeat or {"interval": "1m"})))
        objects.upsert(parse_object(alert_doc(f"quiet-{i}", heartbeat=None)))
    return clock, objects, Heartbeats(objects, MemoryStore(clock=clock), clock=clock), []


async def test_many_alerts_beat_once_per_interval_and_idle_ticks_cost_nothing() -> None:
    clock, objects, beats, queued = rig()

    async def enqueue(n: Notification) -> None:
        queued.append(n)

    assert await beats.beat_due(enqueue) == ALERTS
    for _ in range(59):  # a minute of ticks: nothing more
        clock.advance(1)
        assert await beats.beat_due(enqueue) == 0
    clock.advance(1)
    assert await beats.beat_due(enqueue) == ALERTS  # the next round, not before
    assert len(queued) == 2 * ALERTS

    clock.advance(1)
    await beats.beat_due(enqueue)  # the scan after a round
    started = time.process_time()
    for _ in range(1000):
        clock.advance(0.001)
        await beats.beat_due(enqueue)
    per_tick = (time.process_time() - started) / 1000
    print(f"[heartbeat] {ALERTS} heartbeat Alerts + {ALERTS} others: idle tick {per_tick * 1e6:.1f} µs")
    assert per_tick < 0.001  # a full scan of 6,000 Alerts is ~10 ms: idle ticks do not scan

    objects.upsert(parse_object(alert_doc("beat-0", heartbeat={"interval": "2m"})))  # a change: one scan
    clock.advance(0.001)
    assert await beats.beat_due(enqueue) == 0


async def test_an_interval_under_the_minimum_never_beats() -> None:
    clock, _, beats, queued = rig(interval="1s")

    async def enqueue(n: Notification) -> None:
        queued.append(n)

    for _ in range(5):
        assert await beats.beat_due(enqueue) == 0
        clock.advance(1)
    assert queued == []


async def test_what_the_scheduler_remembers_goes_with_the_alerts() -> None:
    clock, objects, beats, queued = rig()

    async def enqueue(n: Notification) -> None:
        queued.append(n)

    await beats.beat_due(enqueue)
    assert len(beats._last) == len(beats._intervals) == ALERTS
    for i in range(ALERTS - 10):
        objects.delete("Alert", NS, f"beat-{i}")
    objects.upsert(parse_object(alert_doc(f"beat-{ALERTS - 1}", suspend=True)))
    clock.advance(1)
    await beats.beat_due(enqueue)
    assert len(beats._last) == len(beats._intervals) == 9

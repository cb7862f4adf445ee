"""The mute-window stage over the real in-memory store and a manual clock: muteTimes and activeTimes in a
chosen time zone hold during the window and not outside it; the end sends one summary."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from notification_controller.core.noise import Suppressed
from notification_controller.dispatch.model import Draft, Drop
from notification_controller.dispatch.quiet import Quiet
from notification_controller.dispatch.quiet.summary import HELD
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import ObjectStore
from tests.unit.dispatch.quiet.test_silences import Rig, event, provider

BERLIN_NIGHT = [{"times": [{"startTime": "22:00", "endTime": "24:00"}], "location": "Europe/Berlin"}]
OFFICE_HOURS = [{"weekdays": ["monday:friday"], "times": [{"startTime": "09:00", "endTime": "17:00"}]}]


def at(text: str) -> ManualClock:
    return ManualClock(datetime.fromisoformat(text).astimezone(UTC))


def make(text: str, **spec: Any) -> Rig:
    """A rig whose clock starts at ``text`` and whose Alert has ``spec``."""
    return Rig(clock=at(text), **spec)


async def test_an_alert_without_the_fields_takes_the_old_path() -> None:
    rig = make("2026-01-01T22:30:00+01:00")
    draft = Draft(event(), rig.alert)
    assert rig.quiet.windows(draft) is draft


async def test_mute_times_in_berlin_hold_during_the_window_and_not_outside() -> None:
    rig = make("2026-01-01T21:59:00+01:00", muteTimes=BERLIN_NIGHT)  # 20:59 UTC
    assert isinstance(await rig.run(event()), Draft)
    rig.clock.advance(60)  # 22:00 in Berlin
    held = await rig.run(event())
    assert isinstance(held, Drop) and held.reason == Suppressed.MUTED and held.suppressed
    assert "muted by spec.muteTimes[0] until 2026-01-01T23:00:00Z" in held.message
    assert isinstance(await rig.run(event("db", "info", "fine")), Drop)
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 0
    rig.clock.advance(3600)  # 23:00 in Berlin: still muted
    assert isinstance(await rig.run(event()), Drop)
    rig.clock.advance(3600)  # midnight in Berlin: the window ended
    assert isinstance(await rig.run(event()), Draft)
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 1
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 0
    (summary,) = rig.sent
    assert summary.event.metadata[HELD] == "3"
    assert summary.message is not None
    assert summary.message.title.startswith("spec.muteTimes ended: 3 notifications held")


async def test_active_times_hold_outside_and_say_until_when() -> None:
    rig = make("2026-01-03T10:00:00+00:00", activeTimes=OFFICE_HOURS)  # a Saturday
    held = await rig.run(event())
    assert isinstance(held, Drop)
    assert "muted by outside spec.activeTimes until 2026-01-05T09:00:00Z" in held.message
    rig.clock.advance(2 * 86400 - 3600)  # Monday 09:00
    assert isinstance(await rig.run(event()), Draft)
    assert await rig.quiet.summaries.send_due(rig.enqueue) == 1
    assert rig.sent[0].message is not None and rig.sent[0].message.title.startswith("spec.activeTimes ended")


async def test_a_window_that_ended_while_the_controller_was_down_is_summarised_at_start() -> None:
    rig = make("2026-01-01T22:30:00+01:00", muteTimes=BERLIN_NIGHT)
    assert isinstance(await rig.run(event()), Drop)
    rig.clock.advance(2 * 3600)
    objects = ObjectStore()
    restarted = Quiet(rig.state, objects, rig.clock)
    objects.upsert(rig.alert)  # the load: an Alert with windows is looked at once
    objects.upsert(provider())
    assert await restarted.summaries.send_due(rig.enqueue) == 1


async def test_a_muted_span_is_computed_once_per_span() -> None:
    rig = make("2026-01-01T22:30:00+01:00", muteTimes=BERLIN_NIGHT)
    first = rig.quiet.windows.span(rig.alert, rig.clock.now())
    rig.clock.advance(60)
    assert rig.quiet.windows.span(rig.alert, rig.clock.now()) is first

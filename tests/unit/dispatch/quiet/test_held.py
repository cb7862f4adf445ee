"""The held records: compare-and-set counts, the bounds on what one record keeps, one claim per record,
and the Silence's total that its status shows (``held_total``)."""

from __future__ import annotations

import asyncio

from notification_controller.api.event import Event
from notification_controller.dispatch.quiet.held import (
    MAX_HELD_OBJECTS,
    MAX_MESSAGE,
    Held,
    HeldStore,
    held_key,
    held_total,
    silence_total_key,
)
from notification_controller.lib.clock import ManualClock
from notification_controller.store.memory import MemoryStore
from tests.unit.dispatch.quiet.test_silences import event, silence


async def test_concurrent_holds_lose_no_count_and_the_total_follows() -> None:
    store = MemoryStore(clock=ManualClock())
    held = HeldStore(store)
    s = silence("m")
    total = silence_total_key("apps", "m", s.metadata.uid)
    await asyncio.gather(
        *(
            held.record("apps/a", s.metadata.uid, "Silence apps/m", 9e9, event(f"o{i % 3}"), 0.0, total)
            for i in range(20)
        )
    )
    record = await held.read("apps/a", s.metadata.uid)
    assert record is not None and record.count == 20
    assert sorted((o.name, o.count) for o in record.objects) == [
        ("kustomization/o0.apps", 7),
        ("kustomization/o1.apps", 7),
        ("kustomization/o2.apps", 6),
    ]
    assert await held_total(store, s) == 20
    assert await held_total(store, silence("other")) == 0


async def test_a_record_is_bounded_whatever_the_flood() -> None:
    store = MemoryStore(clock=ManualClock())
    held = HeldStore(store)
    for i in range(MAX_HELD_OBJECTS + 30):
        await held.record(
            "apps/a", "mute", "spec.muteTimes", 9e9, event(f"app-{i}" * 20, message="x" * 100_000), 0.0
        )
    entry = await store.kv_get(held_key("apps/a", "mute"))
    assert entry is not None
    assert len(entry.value) < 40_000
    record = Held.from_bytes(entry.value)
    assert record.count == MAX_HELD_OBJECTS + 30
    assert len(record.objects) == MAX_HELD_OBJECTS and record.more == 30 and record.more_failing
    assert all(len(o.message) <= MAX_MESSAGE for o in record.objects)


async def test_hostile_names_and_fields_are_cut_in_the_record() -> None:
    store = MemoryStore(clock=ManualClock())
    held = HeldStore(store)
    huge = Event.from_raw(
        {
            "involvedObject": {"kind": "K" * 100_000, "namespace": "n" * 100_000, "name": "x" * 100_000},
            "severity": "s" * 100_000,
            "reason": "r" * 100_000,
            "message": "m" * 100_000,
            "reportingController": "c" * 100_000,
        }
    )
    for i in range(MAX_HELD_OBJECTS + 5):
        other = huge.model_copy(
            update={
                "involved_object": huge.involved_object.model_copy(update={"name": f"{i}" + "x" * 100_000})
            }
        )
        await held.record("apps/a", "mute", "spec.muteTimes", 9e9, other, 0.0)
    entry = await store.kv_get(held_key("apps/a", "mute"))
    assert entry is not None
    assert len(entry.value) < 40_000


async def test_one_claim_per_record_then_a_new_quiet_starts_a_new_record() -> None:
    store = MemoryStore(clock=ManualClock())
    held = HeldStore(store)
    await held.record("apps/a", "mute", "spec.muteTimes", 9e9, event(), 0.0)
    first, second = await asyncio.gather(held.claim("apps/a", "mute"), held.claim("apps/a", "mute"))
    assert [c is not None for c in (first, second)].count(True) == 1
    assert await held.claim("apps/a", "mute") is None
    again = await held.record("apps/a", "mute", "spec.muteTimes", 9e9, event(), 10.0)
    assert again.count == 1 and again.first == 10.0 and not again.claimed


async def test_keys_carry_no_user_text() -> None:
    key = held_key("apps/on-call", "uid-1")
    assert key.startswith("quiet/held/") and "on-call" not in key

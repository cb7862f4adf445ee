"""``groupBy``: events of one Alert with the same group labels join one group, sent by the flusher
(``flush.py``) after ``groupWait`` and then every ``groupInterval``. Each group is its own key; with a
durable store a group also takes a numbered slot, so that a restarted process or another replica finds
it by reading the slots, never one list of every group rewritten with each new one (issue 23 item 5)."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from ...api.alert import Alert
from ...core.noise import Group, Slots, Suppressed, group_labels
from ...errors import StoreError
from ..model import Draft, Drop
from .flush import SLOTS_TTL, GroupFlusher, group_key, group_ttl, slot_key, slots_key, timing
from .state import Full, NoiseState, id_of, suppress

SLOT_BLOCK = 64
"""Slots a process reserves at once for an Alert's new groups (one counter write per 64 new groups)."""


class Groups:
    name = "noise-group"

    def __init__(self, core: NoiseState, flusher: GroupFlusher) -> None:
        self.core = core
        self.flusher = flusher
        self._reserved: dict[str, tuple[int, int]] = {}  # alert id -> this process's free slots [start, end)

    def __call__(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if draft.alert.spec.group_by is None:
            return draft
        return self._group(draft)

    async def _group(self, draft: Draft) -> Draft | Drop:
        alert = draft.alert
        group_by = alert.spec.group_by or []
        wait, interval = timing(alert)
        labels = group_labels(draft.event, group_by)
        key = group_key(alert, labels)
        now = self.core.now()
        template = draft.notification().to_json()
        ttl = group_ttl(wait, interval)
        room = self.core.room(self.core.groups, alert, key, self.core.settings.max_groups_per_alert)

        def step(group: Group | None) -> tuple[bytes | None, tuple[Group, bool]]:
            current = group if group is not None else Group(labels, now)
            updated = current.add(draft.event, template, now, wait, interval)
            return updated.to_bytes(), (updated, group is None or group.due is None)

        try:
            group, batch = await self.core.update(key, Group.from_bytes, step, ttl=ttl, create=room)
            if self.core.state.durable and batch:  # listed for other processes while a batch is pending
                group = await self._list(alert, key, group, ttl)
        except Full:
            return self.core.untracked(
                draft,
                "group",
                "group_limit",
                "--noise-max-groups-per-alert",
                self.core.settings.max_groups_per_alert,
            )
        except StoreError as exc:
            self.core.store_failed("group", exc)
            return draft
        self.core.track(self.core.groups, alert, key, now + ttl)
        if group.due is not None:
            self.flusher.schedule(key, id_of(alert), group.due)
        return suppress(Suppressed.GROUPED, draft, "joined a group")

    async def _list(self, alert: Alert, key: str, group: Group, ttl: float) -> Group:
        """Give a new group a slot (its own slot key; the 17-byte counter is written once per
        ``SLOT_BLOCK`` groups); refresh the slot of a group whose new batch starts. Returns the group as
        stored."""
        alert_id = id_of(alert)
        if group.slot >= 0:
            await self.core.state.kv_put(slot_key(alert_id, group.slot), key.encode(), ttl=ttl)
            return group

        n = await self._take_slot(alert_id)
        await self.core.state.kv_put(slot_key(alert_id, n), key.encode(), ttl=ttl)

        def mark(stored: Group | None) -> tuple[bytes | None, Group | None]:
            if stored is None or stored.slot >= 0:
                return None, stored
            listed = replace(stored, slot=n)
            return listed.to_bytes(), listed

        listed = await self.core.update(key, Group.from_bytes, mark, ttl=ttl)
        return listed if listed is not None else group

    async def _take_slot(self, alert_id: str) -> int:
        """The next slot of this process's block, reserving a new block when it is used up: concurrent
        new groups (this process's or another replica's) rarely meet on the counter's compare-and-set.
        Slots reserved and never used are holes the scan skips."""
        start, end = self._reserved.get(alert_id, (0, 0))
        if start >= end:

            def reserve(slots: Slots | None) -> tuple[bytes | None, int]:
                current = slots or Slots()
                return Slots(current.lo, current.hi + SLOT_BLOCK).to_bytes(), current.hi

            start = await self.core.update(slots_key(alert_id), Slots.from_bytes, reserve, ttl=SLOTS_TTL)
            end = start + SLOT_BLOCK
            current = self._reserved.get(alert_id, (0, 0))
            if current[0] < current[1]:  # another task reserved meanwhile: use its block, keep this one
                start, end = current  # (the block reserved here stays a hole)
        self._reserved[alert_id] = (start + 1, end)
        return start

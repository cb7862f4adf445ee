"""``notifyOn: StateChange``: notify when an object's severity changes, with a "Recovered" message when
it comes back to info."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable

from ...api.alert import NotifyOn
from ...core.noise import (
    ObjectState,
    StateDecision,
    Suppressed,
    digest,
    object_key,
    recovery_event,
    state_step,
)
from ...errors import StoreError
from ...providers.message import Message
from ..model import Draft, Drop
from .state import Full, NoiseState, id_of, suppress


class StateChange:
    name = "noise-state"

    def __init__(self, core: NoiseState) -> None:
        self.core = core

    def __call__(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if draft.alert.spec.notify_on is not NotifyOn.STATE_CHANGE:
            return draft
        return self._state_change(draft)

    async def _state_change(self, draft: Draft) -> Draft | Drop:
        now = self.core.now()
        alert = draft.alert
        key = "noise/state/" + digest(id_of(alert), object_key(draft.event))
        retention = self.core.settings.state_retention
        room = self.core.room(self.core.keys, alert, key, self.core.settings.max_keys_per_alert)

        def step(previous: ObjectState | None) -> tuple[bytes | None, StateDecision]:
            decision = state_step(previous, draft.event, now)
            return (decision.state.to_bytes() if decision.state is not None else None), decision

        try:  # an object never notified and still healthy writes nothing, so costs no key
            decision = await self.core.update(key, ObjectState.from_bytes, step, ttl=retention, create=room)
        except Full:
            return self.core.untracked(
                draft,
                "state",
                "key_limit",
                "--noise-max-keys-per-alert",
                self.core.settings.max_keys_per_alert,
            )
        except StoreError as exc:
            self.core.store_failed("state change", exc)
            return draft
        if not decision.send:
            return suppress(Suppressed.STATE, draft, f"still {draft.event.severity or 'info'}")
        self.core.track(self.core.keys, alert, key, now + retention)
        previous = decision.recovered_from
        if previous is None:
            return draft
        event = recovery_event(draft.event, previous, now)
        base = Message.of(event)
        message = dataclasses.replace(base, title=f"Recovered: {base.title}")
        return dataclasses.replace(draft, event=event, message=message)

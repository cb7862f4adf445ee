"""``spec.threshold``: notify only once ``count`` events of one object arrived ``within`` a window."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable

from ...core.noise import (
    OCCURRENCES,
    Arrivals,
    Suppressed,
    ThresholdDecision,
    describe_threshold,
    digest,
    object_key,
    threshold_step,
)
from ...errors import StoreError
from ...lib.duration import parse_duration
from ..model import Draft, Drop
from .state import Full, NoiseState, id_of, suppress


class Threshold:
    name = "noise-threshold"

    def __init__(self, core: NoiseState) -> None:
        self.core = core

    def __call__(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if draft.alert.spec.threshold is None:
            return draft
        return self._threshold(draft)

    async def _threshold(self, draft: Draft) -> Draft | Drop:
        spec = draft.alert.spec.threshold
        assert spec is not None
        count, within = spec.count, parse_duration(spec.within)
        now = self.core.now()
        alert = draft.alert
        key = "noise/threshold/" + digest(id_of(alert), object_key(draft.event))
        room = self.core.room(self.core.keys, alert, key, self.core.settings.max_keys_per_alert)

        def step(state: Arrivals | None) -> tuple[bytes | None, ThresholdDecision]:
            decision = threshold_step(state, now, count, within)
            return decision.state.to_bytes(), decision

        try:
            decision = await self.core.update(key, Arrivals.from_bytes, step, ttl=within, create=room)
        except Full:
            return self.core.untracked(
                draft,
                "threshold",
                "key_limit",
                "--noise-max-keys-per-alert",
                self.core.settings.max_keys_per_alert,
            )
        except StoreError as exc:
            self.core.store_failed("threshold", exc)
            return draft
        self.core.track(self.core.keys, alert, key, now + within)
        if not decision.send:
            return suppress(
                Suppressed.THRESHOLD, draft, f"{decision.seen} of {count} events within {spec.within}"
            )
        event = draft.event
        metadata = {**event.metadata, OCCURRENCES: describe_threshold(decision.seen, within)}
        return dataclasses.replace(draft, event=event.model_copy(update={"metadata": metadata}))

"""``repeatInterval``: an identical notification is sent at most once per interval."""

from __future__ import annotations

from collections.abc import Awaitable

from ...core.noise import Suppressed, digest, identity
from ...errors import StoreError
from ...lib.duration import parse_duration
from ..model import Draft, Drop
from .state import NoiseState, id_of, suppress


class Repeat:
    name = "noise-repeat"

    def __init__(self, core: NoiseState) -> None:
        self.core = core

    def __call__(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        if not draft.alert.spec.repeat_interval:
            return draft
        return self._repeat(draft)

    async def _repeat(self, draft: Draft) -> Draft | Drop:
        interval = draft.alert.spec.repeat_interval
        assert interval is not None
        alert = draft.alert
        key = "noise/repeat/" + digest(id_of(alert), identity(draft.event))
        if not self.core.room(self.core.keys, alert, key, self.core.settings.max_keys_per_alert):
            return self.core.untracked(
                draft,
                "repeat",
                "key_limit",
                "--noise-max-keys-per-alert",
                self.core.settings.max_keys_per_alert,
            )
        ttl = parse_duration(interval)
        try:
            seen = await self.core.state.seen(key, ttl)
        except StoreError as exc:
            self.core.store_failed("repeat", exc)
            return draft
        if seen:
            return suppress(Suppressed.REPEAT, draft, f"identical notification sent less than {interval} ago")
        self.core.track(self.core.keys, alert, key, self.core.now() + ttl)
        return draft

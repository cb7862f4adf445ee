"""The state every noise-control stage shares: the KV store, compare-and-set updates, and the per-Alert
caps on what this process tracks (the package docstring, ``__init__.py``, says why they exist)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry

from ...api.alert import Alert
from ...core.noise import Suppressed
from ...errors import StoreError
from ...lib.clock import Clock
from ...lib.deadlines import Deadlines
from ...lib.duration import parse_duration
from ...metrics import NoiseMetrics
from ...objects.base import ObjectStore
from ...settings import NoiseControlSettings
from ...store.base import Store
from ..model import Draft, Drop

log = logging.getLogger(__package__)  # one logger for the feature: notification_controller.dispatch.noise

CAS_ATTEMPTS = 8
"""Compare-and-set retries before a stage gives up and lets the notification through."""
WARN_INTERVAL = 300.0
"""At most one Warning per Alert this often when a cap lets events through untracked."""

T = TypeVar("T")
R = TypeVar("R")


Warn = Callable[[Alert, str, str], None]
"""``warn(alert, reason, message)``: a Warning Event on the Alert."""


class Full(Exception):
    """A stage would create a key past its Alert's cap."""


def seconds(value: str | None, default: float) -> float:
    return parse_duration(value) if value else default


def suppress(reason: Suppressed, draft: Draft, why: str) -> Drop:
    return Drop(reason, f"{draft.event.involved_object.describe()}: {why}", suppressed=True)


def id_of(alert: Alert) -> str:
    meta = alert.metadata
    return f"{meta.namespace}/{meta.name}"


class NoiseState:
    """The store, the clock and the caps (see the module docstring)."""

    def __init__(
        self,
        state: Store,
        objects: ObjectStore,
        clock: Clock,
        settings: NoiseControlSettings | None = None,
        *,
        warn: Warn | None = None,
        metrics: NoiseMetrics | None = None,
    ) -> None:
        self.state = state
        self.objects = objects
        self.clock = clock
        self.settings = settings or NoiseControlSettings()
        self.warn = warn or (lambda alert, reason, message: None)
        self.metrics = metrics or NoiseMetrics(CollectorRegistry())
        self.store_errors = 0
        # what this process wrote, per Alert id: key -> expiry (the caps count these)
        self.keys: dict[str, Deadlines] = {}
        self.groups: dict[str, Deadlines] = {}
        self._warned: dict[str, float] = {}
        self.metrics.keys.labels(kind="keys").set_function(lambda: self._count(self.keys))
        self.metrics.keys.labels(kind="groups").set_function(lambda: self._count(self.groups))

    def now(self) -> float:
        return self.clock.time()

    async def update(
        self,
        key: str,
        decode: Callable[[bytes], T],
        step: Callable[[T | None], tuple[bytes | None, R]],
        ttl: float,
        *,
        create: bool = True,
    ) -> R:
        """Read ``key``, compute (new bytes or None for no write, result), compare-and-set; retry on a
        concurrent writer. Raises ``StoreError``, and ``_Full`` when the key is absent, would be written,
        and ``create`` is false."""
        for _ in range(CAS_ATTEMPTS):
            entry = await self.state.kv_get(key)
            value = decode(entry.value) if entry is not None else None
            new, result = step(value)
            if new is None:
                return result
            if entry is None and not create:
                raise Full(key)
            written = await self.state.kv_cas(
                key, new, expected=entry.revision if entry is not None else None, ttl=ttl
            )
            if written is not None:
                return result
        raise StoreError(f"noise control: {CAS_ATTEMPTS} concurrent writers on one key")

    def store_failed(self, stage: str, exc: StoreError) -> None:
        self.store_errors += 1
        self.metrics.untracked.labels(stage=stage.split()[0], reason="store_error").inc()
        log.warning("noise control %s: state store unavailable, notifying anyway: %s", stage, exc)

    # ---- caps ------------------------------------------------------------------------------------------
    def _count(self, table: dict[str, Deadlines]) -> int:
        now = self.now()
        for alert_id in list(table):
            keys = table[alert_id]
            keys.expired(now)
            if not keys:
                del table[alert_id]
        return sum(len(keys) for keys in table.values())

    def room(self, table: dict[str, Deadlines], alert: Alert, key: str, cap: int) -> bool:
        """Whether ``key`` is tracked for ``alert`` already or a new key fits under ``cap``."""
        keys = table.get(id_of(alert))
        if keys is None or key in keys:
            return True
        if len(keys) < cap:
            return True
        keys.expired(self.now())
        return len(keys) < cap

    @staticmethod
    def track(table: dict[str, Deadlines], alert: Alert, key: str, deadline: float) -> None:
        alert_id = id_of(alert)
        keys = table.get(alert_id)
        if keys is None:
            keys = table[alert_id] = Deadlines()
        keys.set(key, deadline)

    def untracked(self, draft: Draft, stage: str, reason: str, flag: str, cap: int) -> Draft:
        """Past a cap: the event goes through without noise control, counted, warned about now and then."""
        self.metrics.untracked.labels(stage=stage, reason=reason).inc()
        alert = draft.alert
        alert_id = id_of(alert)
        now = self.now()
        if now - self._warned.get(alert_id, -WARN_INTERVAL) >= WARN_INTERVAL:
            self._warned[alert_id] = now
            what = "groups" if reason == "group_limit" else "objects"
            message = (
                f"noise control tracks {cap} {what} for this Alert already ({flag}): events that need a new "
                f"one are notified without {stage} control"
            )
            log.info("alert %s: %s", alert_id, message)  # a flood, not a fault: the Warning says it
            self.warn(alert, "NoiseControlLimitReached", message)
        return draft

"""What the quiet stages and the summaries share (``QuietState``): the held records (``held.py``), the object
cache, the clock, the metrics, and the rate limits on Warnings and status refreshes, so that a flood of held
notifications writes no more Events or statuses than a trickle."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from ...api.alert import Alert
from ...errors import StoreError
from ...lib.clock import Clock
from ...lib.deadlines import Deadlines
from ...metrics import NoiseMetrics
from ...objects.base import ObjectStore
from ...store.base import Store
from .held import HeldStore

log = logging.getLogger(__package__)  # notification_controller.dispatch.quiet


Warn = Callable[[Alert, str, str], None]
"""``warn(alert, reason, message)``: a Warning Event on the Alert."""
Touched = Callable[[Alert], None]
"""``touched(alert)``: something was held for the Alert or its summary went out (its status follows)."""

WARN_INTERVAL = 300.0
"""At most one Warning per Alert this often when a bound lets a notification through unchecked."""
STATUS_INTERVAL = 10.0
"""At most one status refresh per Alert this often while notifications are held (a flood writes no more)."""
MAX_RECORDS_PER_ALERT = 64
"""Silences (and the window) whose holds this process records for one Alert at once: a tenant writes the
Silences and an unauthenticated client the events, so records (each up to ~30 KB) are bounded per Alert too.
Past it, a notification a further Silence matches is still held, counted in its total, but not summarised
(``notification_noise_untracked_total{stage="silence",reason="record_limit"}``, a Warning)."""
_MAX_REMEMBERED = 10_000
"""Alerts whose last Warning / status refresh this process remembers (then it forgets them all)."""


def alert_id(alert: Alert) -> str:
    meta = alert.metadata
    return f"{meta.namespace}/{meta.name}"


class QuietState:
    """What the quiet stages and the summaries share: the records, the object cache, the clock, the
    metrics, and the rate limits on Warnings and status refreshes."""

    def __init__(
        self,
        state: Store,
        objects: ObjectStore,
        clock: Clock,
        *,
        warn: Warn | None = None,
        metrics: NoiseMetrics | None = None,
        cluster_namespace: str = "",
        touched: Touched | None = None,
    ) -> None:
        self.state = state
        self.held = HeldStore(state)
        self.objects = objects
        self.clock = clock
        self.warn = warn or (lambda alert, reason, message: None)
        self.metrics = metrics or NoiseMetrics(CollectorRegistry())
        self.cluster_namespace = cluster_namespace
        self.touched: Touched | None = touched
        self.store_errors = 0
        self._warned: dict[str, float] = {}
        self._status_at: dict[str, float] = {}
        self._records: dict[str, Deadlines] = {}  # alert id -> the records written here, with their expiry

    def room(self, alert: Alert, source: str, until: float) -> bool:
        """Whether a record of ``source`` for ``alert`` is tracked already or fits under
        ``MAX_RECORDS_PER_ALERT`` (then it is tracked until ``until``)."""
        key = alert_id(alert)
        records = self._records.get(key)
        if records is None:
            records = self._records[key] = Deadlines()
        if source not in records and len(records) >= MAX_RECORDS_PER_ALERT:
            records.expired(self.now())
            if len(records) >= MAX_RECORDS_PER_ALERT:
                return False
        records.set(source, until)
        return True

    def now(self) -> float:
        return self.clock.time()

    def store_failed(self, stage: str, exc: StoreError) -> None:
        """The store cannot be reached: the notification goes out (as noise control's stages decide)."""
        self.store_errors += 1
        self.metrics.untracked.labels(stage=stage, reason="store_error").inc()
        log.warning("quiet %s: state store unavailable, notifying anyway: %s", stage, exc)

    def limited(self, alert: Alert, stage: str, reason: str, message: str) -> None:
        """A bound was reached: counted, and a Warning on the Alert at most every ``WARN_INTERVAL``."""
        self.metrics.untracked.labels(stage=stage, reason=reason).inc()
        key = alert_id(alert)
        now = self.clock.monotonic()
        if now - self._warned.get(key, -WARN_INTERVAL) >= WARN_INTERVAL:
            if len(self._warned) >= _MAX_REMEMBERED:
                self._warned.clear()
            self._warned[key] = now
            log.info("alert %s: %s", key, message)
            self.warn(alert, "QuietLimitReached", message)

    def held_for(self, alert: Alert, *, force: bool = False) -> None:
        """Tell the Alert's status (``touched``), at most every ``STATUS_INTERVAL`` unless ``force``."""
        if self.touched is None:
            return
        key = alert_id(alert)
        now = self.clock.monotonic()
        if not force and now - self._status_at.get(key, -STATUS_INTERVAL) < STATUS_INTERVAL:
            return
        if len(self._status_at) >= _MAX_REMEMBERED:
            self._status_at.clear()
        self._status_at[key] = now
        self.touched(alert)

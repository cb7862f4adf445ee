"""Heartbeats: an Alert's ``spec.heartbeat`` sends a "still alive" notification every interval (beyond Flux).

Why: a controller that is down, cut off from its Provider or wedged sends nothing, and nothing is what a quiet
day looks like too. A notification on a schedule lets the receiving end run a dead man's switch
(healthchecks.io, an Opsgenie heartbeat, Alertmanager's ``Watchdog`` pattern): the *absence* of a beat pages.
Prometheus cannot page about a controller that went down with it.

What a beat goes through, and what it skips (docs/monitoring.md says the same to users):

* It is a ``Notification`` handed to the queue like a group's flush (``Dispatcher.enqueue``): the memory lanes
  or the durable outbox, so it gets the normal delivery — the Provider's retries, a durable store's
  redeliveries and dead letters, the history's records, ``notification_delivered_total`` and the latency.
* It skips the pre-queue stages: the Alert's ``eventSources``, ``eventSeverity``, inclusion/exclusion lists,
  noise control (``filter``, ``threshold``, ``repeatInterval``...), Silences, mute windows and inhibition. A
  beat held by a Silence would look exactly like a dead controller (Alertmanager's ``Watchdog`` is not
  silenced by default either). The pre-send stages run (hooks may veto, the Alert's ``template`` renders it);
  the durable store's deferred ``spec.filter`` (``noise/filter.py``) lets heartbeats through.
* ``spec.suspend`` on the Alert stops it; a suspended Provider drops it (``reason="suspended"``), so the
  receiving end notices. An Alert whose ``spec.heartbeat`` is invalid is not Ready and does not beat.

At most once per interval across replicas and restarts: the time of the last beat is kept in the state store
(``heartbeat/<namespace>/<name>``, the noise-control KV: memory, SQLite or NATS) and a beat is made only by the
replica whose compare-and-set of it wins. With the memory store a restart forgets it (one early beat) and
replicas do not share it: there only the leader beats (``leading``). The schedule itself is pure:
``next_beat``. Each replica keeps the last beat it read, so the store is read about once per interval per
Alert, not every tick; and the soonest next beat, so a tick scans the Alerts only when one is due or an
Alert or Provider changed (5,000 heartbeat Alerts: 35 ms per tick before, ~2 µs per idle tick since;
tests/adversarial/test_heartbeat_bounds.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import Counter

from ..api.alert import Alert
from ..api.event import Event, ObjectReference
from ..api.provider import COMMIT_STATUS_TYPES
from ..core.metadata import combine_metadata
from ..errors import StoreError
from ..lib.clock import Clock, SystemClock
from ..lib.duration import format_duration
from ..objects.base import Change, ObjectStore
from ..store.base import Store
from .model import Notification, Ref

log = logging.getLogger(__name__)

KEY_PREFIX = "heartbeat/"
ID_PREFIX = "heartbeat-"
"""Every beat's notification id starts with it (``is_heartbeat``)."""
REASON = "Heartbeat"
CONTROLLER = "notification-controller"
ALERT_API_VERSION = "notification.toolkit.fluxcd.io/v1beta3"
ALERT_GROUP = "notification.toolkit.fluxcd.io"
INTERVAL_METADATA = "heartbeatInterval"
MIN_KEY_TTL = 86400.0
"""A beat's record outlives two intervals and at least a day: an Alert whose interval grew does not read as
never having beaten after a restart (it is deleted with its Alert by expiry, never by a scan)."""

Enqueue = Callable[[Notification], Awaitable[None]]


def next_beat(last: float | None, interval: float, now: float) -> float:
    """When the next beat is due (epoch seconds): ``interval`` after the last one; now when there was none, or
    when the last one is dated more than an interval ahead (a clock stepped back must not stop the beats)."""
    if last is None or last > now + interval:
        return now
    return last + interval


def is_heartbeat(notification: Notification) -> bool:
    return notification.id.startswith(ID_PREFIX)


def key_of(alert: Alert) -> str:
    meta = alert.metadata
    return f"{KEY_PREFIX}{meta.namespace}/{meta.name}"


def beat(alert: Alert, provider_type: str, interval: float, now: float) -> Notification:
    """The notification of one beat of ``alert`` at ``now`` (epoch seconds)."""
    meta, spec = alert.metadata, alert.spec
    assert spec.heartbeat is not None
    every = format_duration(interval)
    message = spec.heartbeat.message or (
        f"{CONTROLLER} is alive: heartbeat of Alert {meta.namespace}/{meta.name}, every {every}"
    )
    metadata = combine_metadata({}, ALERT_GROUP, spec.event_metadata, spec.summary).metadata
    metadata[INTERVAL_METADATA] = every
    event = Event(
        involved_object=ObjectReference(
            kind="Alert", namespace=meta.namespace, name=meta.name, api_version=ALERT_API_VERSION
        ),
        severity="info",
        timestamp=datetime.fromtimestamp(now, UTC),
        message=message,
        reason=REASON,
        metadata=metadata,
        reporting_controller=CONTROLLER,
    )
    digest = hashlib.sha256(f"{meta.namespace}/{meta.name}/{meta.uid or ''}/{now!r}".encode()).hexdigest()
    return Notification(
        ID_PREFIX + digest[:32],
        event,
        Ref.of(alert),
        Ref(meta.namespace, spec.provider_ref.name),
        provider_type,
        received_at=now,
    )


@dataclass(frozen=True)
class Due:
    alert: Alert
    provider_type: str
    interval: float


class Heartbeats:
    """Sends the due beats every ``tick`` seconds (see the module docstring). ``leading``: whether this replica
    may beat now (Kubernetes mode with leader election and the memory store: the leader only)."""

    def __init__(
        self,
        objects: ObjectStore,
        state: Store,
        *,
        clock: Clock | None = None,
        leading: Callable[[], bool] = lambda: True,
        counter: Counter | None = None,
        tick: float = 1.0,
    ) -> None:
        self.objects = objects
        self.state = state
        self.clock = clock or SystemClock()
        self.leading = leading
        self.counter = counter
        self.tick = tick
        self._last: dict[str, float] = {}  # key -> the last beat this replica knows of (epoch seconds)
        self._intervals: dict[
            str, tuple[Alert, float | None]
        ] = {}  # key -> (that Alert object, its interval)
        self._failing = False
        self._next = 0.0  # the soonest beat by what this replica knows; no scan before it...
        self._dirty = True  # ...unless an Alert or Provider changed since the last scan
        objects.subscribe(self._changed)
        self.sent = 0

    def _changed(self, change: Change) -> None:
        if change.kind in ("Alert", "Provider"):
            self._dirty = True

    def due(self, now: float) -> list[Due]:
        """The Alerts whose next beat is due by what this replica knows (the store has the last word)."""
        found: list[Due] = []
        keys: set[str] = set()
        soonest = math.inf
        for alert in self.objects.alerts():
            if alert.spec.heartbeat is None or alert.spec.suspend:
                continue
            key = key_of(alert)
            keys.add(key)
            known = self._intervals.get(key)
            if known is None or known[0] is not alert:  # objects are immutable: a change is a new one
                known = self._intervals[key] = (alert, alert.spec.heartbeat_interval())
            interval = known[1]
            provider = self.objects.provider(alert.metadata.namespace, alert.spec.provider_ref.name)
            if interval is None or provider is None or provider.spec.type in COMMIT_STATUS_TYPES:
                continue  # not Ready (its status says why), or a commit status: no object to set it on
            at = next_beat(self._last.get(key), interval, now)
            soonest = min(soonest, at)
            if now >= at:
                found.append(Due(alert, str(provider.spec.type), interval))
        for gone in self._last.keys() - keys:  # deleted, suspended or changed Alerts: bounded by the Alerts
            del self._last[gone]
        for gone in self._intervals.keys() - keys:
            del self._intervals[gone]
        self._next, self._dirty = soonest, False
        return found

    async def beat_due(self, enqueue: Enqueue) -> int:
        """Make and queue every due beat this replica wins; return how many."""
        now = self.clock.now().timestamp()
        if not self._dirty and now < self._next:
            return 0  # an idle tick costs a comparison, whatever the number of Alerts
        sent = 0
        due = self.due(now)
        self._dirty = bool(due)  # what was due was beaten, or read from the store: scan once more
        for item in due:
            try:
                if await self._beat(item, now, enqueue):
                    sent += 1
            except StoreError as exc:
                self._count("store_error")
                if not self._failing:
                    log.warning("heartbeat of alert %s: state store failed: %s", key_of(item.alert), exc)
                self._failing = True
                return sent
        self._failing = False
        self.sent += sent
        return sent

    async def _beat(self, item: Due, now: float, enqueue: Enqueue) -> bool:
        key = key_of(item.alert)
        entry = await self.state.kv_get(key)
        last = _decode(entry.value) if entry is not None else None
        if now < next_beat(last, item.interval, now):
            self._last[key] = last if last is not None else now  # another replica (or life) beat already
            return False
        ttl = max(2 * item.interval, MIN_KEY_TTL)
        revision = await self.state.kv_cas(
            key, repr(now).encode(), expected=entry.revision if entry is not None else None, ttl=ttl
        )
        if revision is None:  # another replica won this beat
            self._last.pop(key, None)  # read it again next tick
            return False
        self._last[key] = now
        notification = beat(item.alert, item.provider_type, item.interval, now)
        try:
            await enqueue(notification)
        except Exception:
            # not queued: give the beat back so the next tick tries again (at most once, never zero)
            previous = entry.value if entry is not None else None
            if previous is not None:
                await self.state.kv_cas(key, previous, expected=revision, ttl=ttl)
            else:
                await self.state.kv_cas(key, b"0", expected=revision, ttl=ttl)
            self._last.pop(key, None)
            raise
        self._count("sent")
        log.debug("heartbeat of alert %s queued", key)
        return True

    def _count(self, outcome: str) -> None:
        if self.counter is not None:
            self.counter.labels(outcome=outcome).inc()

    async def run(self, enqueue: Enqueue) -> None:
        """Beat every ``tick`` seconds until cancelled (while ``leading``)."""
        while True:
            await asyncio.sleep(self.tick)
            if not self.leading():
                continue
            try:
                await self.beat_due(enqueue)
            except Exception as exc:  # never let the heartbeat die: the next tick tries again
                self._count("error")
                log.error("heartbeat failed: %s: %s", type(exc).__name__, exc)


def _decode(value: bytes) -> float | None:
    """A stored beat time; None for what this version did not write (then: beat now)."""
    try:
        last = float(value)
    except ValueError:
        return None
    return last if last > 0 else None

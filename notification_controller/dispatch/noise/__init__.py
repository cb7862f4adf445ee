"""Noise control as pipeline stages: what an Alert's ``filter``, ``threshold``, ``notifyOn``,
``repeatInterval``, ``groupBy`` and ``threadBy`` do (docs/noise-control.md; decisions: ``core/noise.py``).

The five pre-queue stages run after Flux's rules, in this order: filter → threshold → state change →
repeat → group (one module each: ``filter.py``, ``threshold.py``, ``statechange.py``, ``repeat.py``,
``groups.py``; the flusher of groups is ``flush.py``, threads ``threads.py``, what they share ``state.py``). Each does nothing (and costs one attribute check) for an Alert without its field, so a Flux
Alert goes through exactly as before. A suppressed event is a ``Drop(suppressed=True)``: counted in
``notification_suppressed_total{reason}`` and logged at debug level, never silently.

State lives in the store's KV (``store/``, the ``--store`` flag): with ``--store=memory`` in this process (lost on
restart, not shared), with ``sqlite:`` across restarts, with ``nats://`` across replicas. Writes are
compare-and-set, so two replicas counting the same object never lose an arrival. Keys are digests of the
Alert and of what the state is about (user text never reaches a key verbatim).

Grouping keeps each group in its own key. The process that creates or joins a group schedules its flush
in memory (``lib/deadlines``, ``flush.py``); with a durable store the group also takes a numbered slot (``Slots``), so a
restarted process or another replica finds it by reading the slots, never one list of every group that
would be rewritten with each new one (issue 23 item 5). ``run`` (one task per process) flushes due groups
every ``tick``. A flushed group's notification id is derived from the group and its flush count, so two
replicas flushing the same batch write one outbox item.

Unauthenticated events choose the objects and group labels, so the state is bounded (issue 23 item 5):
every key has a TTL (``threshold.within``, ``repeatInterval``, the group's lifetime, and
``--noise-state-retention`` for state changes), and an Alert tracks at most ``--noise-max-keys-per-alert``
keys and ``--noise-max-groups-per-alert`` groups in this process. Past a cap, an event that would need a
new key is let through without noise control, counted in
``notification_noise_untracked_total{stage,reason}`` and reported by a Warning on the Alert at most every
five minutes: the same choice as for a store error.

``threadBy`` is a pre-send stage (it reads the thread of the key) and a post-send one (it remembers the
thread a delivery started); it applies to notifiers whose ``threads`` is true (Slack's chat.postMessage
with a bot token).

When the store cannot be reached, a stage lets the notification through (``StoreError`` is logged and
counted, ``reason="store_error"``): a notification too many is better than one lost.
"""

from __future__ import annotations

from ...lib.clock import Clock
from ...metrics import NoiseMetrics
from ...objects.base import ObjectStore
from ...sandbox import SandboxPool
from ...settings import NoiseControlSettings
from ...store.base import Store
from ..model import Delivery, Draft
from ..stage import Stage, StageLike
from .filter import Filter
from .flush import SCAN_PER_TICK, Enqueue, GroupFlusher
from .groups import Groups
from .repeat import Repeat
from .state import NoiseState, Warn
from .statechange import StateChange
from .threads import Threads
from .threshold import Threshold

__all__ = ["SCAN_PER_TICK", "NoiseControl"]


class NoiseControl:
    """The noise-control stages over one ``Store``, and the group flusher (see the package docstring)."""

    def __init__(
        self,
        state: Store,
        objects: ObjectStore,
        clock: Clock,
        settings: NoiseControlSettings | None = None,
        *,
        tick: float = 1.0,
        warn: Warn | None = None,
        metrics: NoiseMetrics | None = None,
        sandbox: SandboxPool | None = None,
    ) -> None:
        self.core = NoiseState(state, objects, clock, settings, warn=warn, metrics=metrics)
        self.flusher = GroupFlusher(self.core, tick)
        self.filter = Filter(self.core, sandbox)
        self.threshold = Threshold(self.core)
        self.state_change = StateChange(self.core)
        self.repeat = Repeat(self.core)
        self.groups = Groups(self.core, self.flusher)
        self.threads = Threads(self.core)

    @property
    def state(self) -> Store:
        return self.core.state

    @property
    def store_errors(self) -> int:
        return self.core.store_errors

    def pre_queue(self) -> list[StageLike[Draft]]:
        return [self.filter, self.threshold, self.state_change, self.repeat, self.groups]

    def at_send(self) -> list[StageLike[Delivery]]:
        """Pre-send, durable stores: the ``spec.filter`` the pre-queue stage deferred (issue 23)."""
        return [Stage("noise-filter-at-send", self.filter.at_send)]

    def pre_send(self) -> list[StageLike[Delivery]]:
        return [self.threads]

    def post_send(self) -> list[StageLike[Delivery]]:
        return [Stage("noise-thread-started", self.threads.started)]

    async def flush_due(self, enqueue: Enqueue) -> int:
        return await self.flusher.flush_due(enqueue)

    async def run(self, enqueue: Enqueue) -> None:
        await self.flusher.run(enqueue)

"""The operator's side of quiet (issue 26, docs/silences.md): Silences, mute and active times, and the
summary of what they held.

Two pre-queue stages run after noise control, so that what they hold is what noise control would have sent:
``silences.py`` (a Silence of the Alert's namespace, or a cluster-wide one, matches the notification) then
``windows.py`` (the Alert's ``spec.muteTimes`` / ``spec.activeTimes``). A held notification is a
``Drop(reason, why, suppressed=True)`` with ``reason`` ``silenced`` or ``muted``: counted in
``notification_suppressed_total{reason}``, logged at debug level, recorded in the store's KV (``held.py``)
and summarised once when the Silence or the window ends (``summary.py``, one task per process, like noise
control's group flusher). An Alert without a Silence in its namespace and without the time fields costs a
dict lookup and two attribute checks.

The package's other stages, built by ``builder.py`` beside these: inhibition (``inhibit.py``, a third
pre-queue stage; ``observe.py`` notes failing sources from every event, ``failing.py`` keeps them,
``release.py`` names the held dependents when a source recovers) and ``inplace.py`` (``resolveInPlace``: a
pre-send stage that turns a recovery into an edit of the failure's chat message, a post-send one that keeps
the message id).

State follows the store (``--store``): in this process with ``memory``, across restarts with ``sqlite:``,
across replicas with ``nats://`` (compare-and-set writes, a summary claimed by one replica). Silences and the
time fields are objects: the API server or the manifests are their truth.
"""

from __future__ import annotations

from datetime import datetime

from ...api.alert import Alert
from ...lib.clock import Clock
from ...metrics import NoiseMetrics
from ...objects.base import ObjectStore
from ...store.base import Store
from ..model import Draft
from ..stage import StageLike
from .held import MUTE, Held, held_total
from .shared import QuietState, Touched, Warn, alert_id
from .silences import Silences
from .summary import Enqueue, Summaries
from .windows import Span, Windows

__all__ = ["HELD_MUTED", "HELD_SILENCED", "Quiet", "held_total"]

MAX_SHOWN = 8
"""Silences read for the Alert's ``Held`` condition (a status message stays short)."""
HELD_SILENCED = "Silenced"
HELD_MUTED = "Muted"
"""Reasons of an Alert's ``Held`` condition (a Silence holds something; only its mute window does)."""


class Quiet:
    """The quiet stages over one ``Store``, and the summaries (see the package docstring)."""

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
        tick: float = 1.0,
    ) -> None:
        self.core = QuietState(
            state,
            objects,
            clock,
            warn=warn,
            metrics=metrics,
            cluster_namespace=cluster_namespace,
            touched=touched,
        )
        self.silences = Silences(self.core)
        self.summaries = Summaries(self.core, self._muted_at, tick)
        self.windows = Windows(self.core, self.summaries.window_ends)

    def _muted_at(self, alert: Alert, at: datetime) -> Span | None:
        return self.windows.span(alert, at)

    def pre_queue(self) -> list[StageLike[Draft]]:
        return [self.silences, self.windows]

    async def held(self, alert: Alert) -> list[tuple[Held, str]]:
        """What is held for ``alert`` now, with what holds it (``Silence ns/name until …`` or ``muted by …``):
        the active Silences that apply (at most those the stage would evaluate) and the window. For the
        Alert's status. Raises ``StoreError``."""
        now = self.core.now()
        key = alert_id(alert)
        found: list[tuple[Held, str]] = []
        own, cluster = self.silences.index.applying(alert.metadata.namespace)
        active = [c for c in (*own, *cluster) if c.active(now)]
        for silence in active[:MAX_SHOWN]:
            record = await self.core.held.read(key, silence.uid)
            if record is not None and not record.claimed and record.count:
                found.append((record, silence.describe()))
        if alert.spec.mute_times or alert.spec.active_times:
            span = self.windows.span(alert, self.core.clock.now())
            if span is not None and span.why:
                record = await self.core.held.read(key, MUTE)
                if record is not None and not record.claimed and record.count:
                    found.append((record, span.describe()))
        return found

    async def status(self, alert: Alert) -> tuple[str, str] | None:
        """The Alert's ``Held`` condition: (reason, message), or None when nothing is held. Raises
        ``StoreError``."""
        held = await self.held(alert)
        if not held:
            return None
        parts = [
            f"{record.count} notification{'s' if record.count != 1 else ''} {why}" for record, why in held
        ]
        reason = HELD_SILENCED if any(record.source != MUTE for record, _ in held) else HELD_MUTED
        return reason, "; ".join(parts)

    async def run(self, enqueue: Enqueue) -> None:
        await self.summaries.run(enqueue)

"""The summaries: when a Silence ends (its ``endsAt`` passes, ``silence expire`` moves it to now, or it is
deleted) or an Alert's mute window ends, each Alert that had notifications held sends ONE notification
saying how many were held, per object, and which objects are still failing (the last notification held for
them was an error) — unless the Silence says ``spec.summary: false``. Nothing held is silently lost.

One task per process (``run``, every ``tick``), a producer like the event server and noise control's group
flusher (``dispatch/noise/flush.py``): it is given the queue's ``enqueue``. What to look at and when comes
from the object cache's changes: each Silence is scheduled at its end (``lib/deadlines``), a deleted one at
once; each Alert with mute or active times is looked at when it is first seen or its spec changes, and the
window stage schedules the end of each window it holds in. At a look the current object decides (an
``endsAt`` moved later: look again then; a window still muting: look at its end).

Replicas and restarts: the records are in the store (``held.py``). Every replica schedules the same ends; at
the end one compare-and-set *claims* a record, and only the replica that won sends; the notification's id is
derived from the record (the outbox would store a second one once). After a restart, loading the objects
schedules every Silence and windowed Alert again, and an end that passed while the controller was down is
looked at at once: a record not yet claimed is summarised then.

Which Alerts to look at when a Silence ends: those of its namespace (every namespace for a cluster-wide
one), from the object cache — one ``kv_get`` per Alert, once per Silence end; no index of held Alerts is
written on the hot path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from ...api.alert import Alert
from ...api.event import SEVERITY_ERROR, SEVERITY_INFO, Event, EventDecodeError, ObjectReference
from ...api.silence import Silence
from ...core.noise import digest
from ...errors import StoreError
from ...lib.deadlines import Deadlines
from ...objects.base import Change
from ...providers.message import Message
from ..model import Notification, Ref
from .held import HELD_GRACE, MUTE, Held, held_key
from .shared import QuietState, alert_id
from .windows import Span

log = logging.getLogger(__package__)

Enqueue = Callable[[Notification], Awaitable[None]]
MutedAt = Callable[[Alert, datetime], Span | None]

MAX_LOOKS_PER_TICK = 256
"""Silence ends and window ends looked at per tick at most (the rest wait for the next tick)."""
STORE_RETRY = 5.0
"""Seconds before a look that met a store error is tried again."""
SHOWN_OBJECTS = 20
"""Objects listed in a summary's text (all of them are counted)."""
MAX_COMMENT = 200
"""Characters of the Silence's comment quoted in its summary (its first line)."""
SUMMARY_REASON = "QuietSummary"
"""The summary's event reason."""
HELD = "held"
STILL_FAILING = "stillFailing"
HELD_BY = "heldBy"


@dataclass(frozen=True)
class SilenceEnd:
    """What the summary of one Silence needs after the object is gone."""

    namespace: str
    name: str
    uid: str
    summary: bool
    all_namespaces: bool
    comment: str = ""

    @classmethod
    def of(cls, silence: Silence) -> SilenceEnd:
        meta = silence.metadata
        uid = meta.uid or f"{meta.namespace}/{meta.name}"
        spec = silence.spec
        return cls(meta.namespace, meta.name, uid, spec.summary, spec.all_namespaces, spec.comment or "")

    @property
    def key(self) -> str:
        return f"silence/{self.namespace}/{self.name}/{self.uid}"


def _when(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary_message(
    held: Held, ended: float, comment: str = ""
) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
    """(title, text, severity, fields) of the summary of ``held`` (``comment``: the Silence's)."""
    failing = held.failing
    failing_count = len(failing) + (1 if held.more_failing else 0)
    plural = "s" if held.count != 1 else ""
    title = f"{held.label} ended: {held.count} notification{plural} held"
    if failing_count:
        title += f", {len(failing)}{'+' if held.more_failing else ''} object{'s' if failing_count != 1 else ''} still failing"
    lines = [f"Held from {_when(held.first)} to {_when(ended)}:"]
    if comment:
        line = comment.split("\n", 1)[0]
        lines.insert(0, f"Comment: {line[:MAX_COMMENT]}")
    for obj in held.objects[:SHOWN_OBJECTS]:
        state = (
            f"still failing: {obj.message}"
            if obj.failing
            else f"last {obj.severity or 'info'}: {obj.message}"
        )
        lines.append(f"• {obj.name}: {obj.count} held, {state}")
    hidden = len(held.objects) - SHOWN_OBJECTS
    if hidden > 0:
        lines.append(f"• …and {hidden} more objects")
    if held.more:
        lines.append(f"• …and {held.more} notifications of further objects")
    fields = (
        (HELD_BY, held.label),
        (HELD, str(held.count)),
        *(((STILL_FAILING, ", ".join(o.name for o in failing)),) if failing else ()),
    )
    severity = SEVERITY_ERROR if failing_count else SEVERITY_INFO
    return title, "\n".join(lines), severity, fields


def summary_notification(
    held: Held, alert: Alert, provider_type: str, ended: float, comment: str = ""
) -> Notification:
    """The one notification that stands for everything ``held`` held (id derived from the record: every
    replica would make the same one)."""
    title, text, severity, fields = summary_message(held, ended, comment)
    try:
        base = Event.decode(held.event) if held.event else None
    except EventDecodeError:
        base = None
    if base is None:
        namespace, _, name = held.alert.partition("/")
        base = Event(involved_object=ObjectReference(kind="Alert", namespace=namespace, name=name))
    event = base.model_copy(
        update={
            "severity": severity,
            "message": f"{title}\n{text}",
            "reason": SUMMARY_REASON,
            "timestamp": datetime.fromtimestamp(ended, UTC),
            "metadata": dict(fields),
        }
    )
    meta = alert.metadata
    return Notification(
        id="quiet-" + digest(held_key(held.alert, held.source), repr(held.first)),
        event=event,
        alert=Ref.of(alert),
        provider=Ref(meta.namespace, alert.spec.provider_ref.name),
        provider_type=provider_type,
        message=Message(title, text, severity, fields),
        group=tuple((o.name, o.severity, o.message) for o in held.objects[:5]),
    )


class Summaries:
    """Schedules and sends the summaries (the module docstring)."""

    def __init__(self, core: QuietState, muted_at: MutedAt, tick: float = 1.0) -> None:
        self.core = core
        self.muted_at = muted_at
        self.tick = tick
        self._due = Deadlines()
        self._silences: dict[str, SilenceEnd] = {}
        self.sent = 0
        core.objects.subscribe(self._changed)

    # ---- scheduling --------------------------------------------------------------------------------------
    def _changed(self, change: Change) -> None:
        if change.kind == "Silence":
            old, new = change.old, change.obj
            replaced = isinstance(old, Silence) and (
                not isinstance(new, Silence) or SilenceEnd.of(new).uid != SilenceEnd.of(old).uid
            )
            if isinstance(old, Silence) and replaced:
                self._silence_at(SilenceEnd.of(old), self.core.now())  # deleted (or replaced): ended now
            if isinstance(new, Silence) and (
                replaced or not isinstance(old, Silence) or old.spec != new.spec
            ):
                # first seen (a start: ends that passed while down are due at once) or its window changed
                window = new.window()
                if window is not None and window[1].timestamp() > self.core.now() - HELD_GRACE:
                    self._silence_at(SilenceEnd.of(new), window[1].timestamp())  # (older: records expired)
        elif change.kind == "Alert" and isinstance(change.obj, Alert):
            spec = change.obj.spec
            if (spec.mute_times or spec.active_times) and (
                not isinstance(change.old, Alert) or change.old.spec != spec
            ):
                self.window_ends(alert_id(change.obj), self.core.now())  # a window that ended while down

    def _silence_at(self, end: SilenceEnd, when: float) -> None:
        self._silences[end.key] = end
        self._due.set(end.key, when)

    def window_ends(self, alert: str, when: float) -> None:
        """The window stage held for ``alert`` until ``when`` (or an Alert to look at): look then."""
        key = f"{MUTE}/{alert}"
        if self._due.at.get(key) != when:
            self._due.set(key, when)

    # ---- looking -----------------------------------------------------------------------------------------
    async def send_due(self, enqueue: Enqueue) -> int:
        """Look at every end that is due; returns the summaries sent."""
        now = self.core.now()
        sent = 0
        for key in self._due.expired(now, limit=MAX_LOOKS_PER_TICK):
            try:
                if key.startswith(f"{MUTE}/"):
                    sent += await self._window(key.removeprefix(f"{MUTE}/"), now, enqueue)
                else:
                    sent += await self._silence(key, now, enqueue)
            except StoreError as exc:
                self.core.store_failed("summary", exc)
                self._due.set(key, now + STORE_RETRY)
        self.sent += sent
        return sent

    async def _silence(self, key: str, now: float, enqueue: Enqueue) -> int:
        end = self._silences.get(key)
        if end is None:
            return 0
        current = self.core.objects.silence(end.namespace, end.name)
        if current is not None and SilenceEnd.of(current).uid == end.uid:
            window = current.window()
            if window is not None and window[1].timestamp() > now:  # endsAt moved later: look then
                self._due.set(key, window[1].timestamp())
                return 0
        if not end.summary:
            log.info("silence %s/%s ended; spec.summary is false: no summary", end.namespace, end.name)
            del self._silences[key]
            return 0
        cluster = self.core.cluster_namespace
        everywhere = end.all_namespaces and cluster and end.namespace == cluster
        alerts = [
            a for a in self.core.objects.alerts() if everywhere or a.metadata.namespace == end.namespace
        ]
        sent = 0
        for alert in alerts:  # a store error: the whole look again later (claimed records answer None)
            sent += await self._send(alert, end.uid, now, enqueue, end.comment)
        del self._silences[key]
        return sent

    async def _window(self, alert_key: str, now: float, enqueue: Enqueue) -> int:
        namespace, _, name = alert_key.partition("/")
        alert = self.core.objects.alert(namespace, name)
        if alert is None:
            return 0
        if alert.spec.mute_times or alert.spec.active_times:
            span = self.muted_at(alert, datetime.fromtimestamp(now, UTC))
            if span is not None and span.why:  # still muted: at the end of this span
                self.window_ends(alert_key, span.end)
                return 0
        return await self._send(alert, MUTE, now, enqueue)

    async def _send(self, alert: Alert, source: str, now: float, enqueue: Enqueue, comment: str = "") -> int:
        key = alert_id(alert)
        if alert.spec.suspend:
            return 0
        provider = self.core.objects.provider(alert.metadata.namespace, alert.spec.provider_ref.name)
        if provider is None:
            return 0
        held = await self.core.held.claim(key, source)
        if held is None:
            return 0
        notification = summary_notification(held, alert, str(provider.spec.type), now, comment)
        try:
            await enqueue(notification)
        except Exception:
            await self.core.held.unclaim(key, source, held)  # the next look sends it
            raise
        log.info("alert %s: %s summarised (%d held)", key, held.label, held.count)
        self.core.held_for(alert, force=True)
        return 1

    async def run(self, enqueue: Enqueue) -> None:
        """Send due summaries every ``tick`` until cancelled."""
        while True:
            await asyncio.sleep(self.tick)
            try:
                await self.send_due(enqueue)
            except Exception as exc:  # never let the task die: the next tick tries again
                log.error("quiet: summary failed: %s", type(exc).__name__)

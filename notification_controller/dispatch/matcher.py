"""Which Alerts an event matches: event sources, severity, inclusion/exclusion, label selectors.

``match(event)`` answers with the Alerts matched now and, when the rest needs work off the loop, an
awaitable of the Alerts matched later: message filters too heavy for the loop run on the filter thread
(``filtering.py``), and label selectors need the involved object's labels (cached, budgeted:
``labels.py``). ``match_inline`` is the synchronous fast path (no heavy filter): a Flux Alert over a
short message never leaves it.

Every Alert dropped here is counted (``notification_dropped_total{reason}``); an event no Alert wants is
counted in ``events_unmatched``. Both are recorded in the history (``Reporter.history``) under the event's
id: a drop per Alert, ``unmatched`` once per event.

``observe`` sees every event first, matched or not (inhibition records the sources that fail and recover:
``quiet/inhibit.py``): when it needs I/O, the matches later wait for it, so a durable store has the failure
before the event's answer, and the memory store's 202 still needs no task of its own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from ..api.event import Event
from ..core.matching import CompiledAlert, SourceMatch, encode_message
from ..history.model import Outcome
from ..metrics import EventMetrics, loop_counter
from ..objects.base import ObjectStore
from ..tracing import NOOP, Tracer
from .filtering import FilterOffload
from .labels import LabelCache, LookupResult
from .model import DropReason
from .report import Reporter
from .traced import Match, traced_match

log = logging.getLogger(__name__)

Candidates = list[tuple[CompiledAlert, SourceMatch]]
Matched = tuple[list[CompiledAlert], Awaitable[list[CompiledAlert]] | None]
"""The Alerts matched now, and an awaitable of those matched later (None: nothing later)."""
Observe = Callable[[Event], Awaitable[None] | None]
"""Sees every event before matching (None: nothing to do; an awaitable when it needs I/O)."""


class Matcher:
    def __init__(
        self,
        store: ObjectStore,
        labels: LabelCache,
        filters: FilterOffload,
        report: Reporter,
        metrics: EventMetrics,
        observe: Observe | None = None,
        tracer: Tracer = NOOP,
    ) -> None:
        # tracing on (--otlp-endpoint): matching in a span (traced.py); off: ``match`` is the method itself
        self.match: Match = traced_match(self._match_event, tracer)
        self.store = store
        self.labels = labels
        self.filters = filters
        self.report = report
        self.metrics = metrics
        self._unmatched_count = loop_counter(metrics.events_unmatched)  # lock-free: metrics.LoopCounter
        self.observe = observe

    def _match_event(self, event: Event, event_id: str = "") -> Matched:
        observed = self.observe(event) if self.observe is not None else None
        matched, later = self._match(event, event_id)
        return (matched, later) if observed is None else (matched, _after(observed, later))

    def _match(self, event: Event, event_id: str) -> Matched:
        candidates = self._candidates(event, event_id)
        if not candidates:  # no Alert takes the object (the common case): nothing to filter
            return self._split(event, candidates, [], event_id)[0], None
        message = event.message
        size = len(message) if message.isascii() else 4 * len(message)  # UTF-8 bytes, at most
        # worst-case work of every candidate's filters (bytes × RE2 program sizes)
        cost = size * sum([compiled.filter_weight for compiled, _ in candidates])
        if self.filters.inline(cost):  # cost 0: no valid expression anywhere, the text is not looked at
            return self.match_inline(event, candidates, message if cost else "", event_id)
        if self._refuse_filters(event, candidates, size, event_id):
            return [], None
        return [], self._match_offloaded(event, candidates, size, event_id)

    def match_inline(self, event: Event, candidates: Candidates, message: str, event_id: str = "") -> Matched:
        """The fast path: filters on the loop; label selectors (if any) later."""
        text = encode_message(message)
        allowed = [compiled.message_allowed(text) for compiled, _ in candidates]
        matched, need_labels = self._split(event, candidates, allowed, event_id)
        return matched, self._match_labels(event, need_labels, event_id) if need_labels else None

    async def _match_offloaded(
        self, event: Event, candidates: Candidates, size: int, event_id: str
    ) -> list[CompiledAlert]:
        text = encode_message(event.message)  # once; the worker runs one Alert's lists at a time
        checks = [functools.partial(compiled.message_allowed, text) for compiled, _ in candidates]
        try:
            allowed = await self.filters.run(checks, size)
        except asyncio.CancelledError:  # shutdown: these notifications will not be made; say so
            self._drop_all(candidates, DropReason.SHUTDOWN, event, event_id)
            raise
        except Exception as exc:
            log.error(
                "message filters failed for %s: %s", event.involved_object.describe(), type(exc).__name__
            )
            self._drop_all(candidates, DropReason.INTERNAL, event, event_id)
            return []
        matched, need_labels = self._split(event, candidates, allowed, event_id)
        if need_labels:
            matched += await self._match_labels(event, need_labels, event_id)
        return matched

    def _candidates(self, event: Event, event_id: str) -> Candidates:
        obj = event.involved_object
        candidates: Candidates = []
        for compiled in self.store.alerts_for(obj.namespace, obj.kind, obj.name):
            if compiled.alert.spec.suspend:
                continue
            result = compiled.match_sources(event)
            if result is SourceMatch.NO:
                continue
            if compiled.refused is not None:  # over its bounds: Ready=False says why; count, deliver nothing
                self._drop_for(compiled, DropReason.CONFIG, event, event_id, compiled.refused)
                log.debug("alert %s/%s refused: %s", compiled.namespace, compiled.name, compiled.refused)
                continue
            for expr in compiled.invalid_inclusion:
                self.report.warn(
                    compiled.alert, "InvalidConfig", f"failed to compile inclusion regex: {expr}"
                )
            for expr in compiled.invalid_exclusion:
                self.report.warn(
                    compiled.alert, "InvalidConfig", f"failed to compile exclusion regex: {expr}"
                )
            candidates.append((compiled, result))
        return candidates

    def _refuse_filters(self, event: Event, candidates: Candidates, size: int, event_id: str) -> bool:
        if self.filters.admit(size):
            return False
        self._drop_all(candidates, DropReason.OVERLOAD, event, event_id)
        log.warning(
            "dropping event for %s: %d events wait for their message filters (heavy inclusion/exclusion lists)",
            event.involved_object.describe(),
            self.filters.backlog,
        )
        return True

    def _split(
        self, event: Event, candidates: Candidates, allowed: list[bool], event_id: str
    ) -> tuple[list[CompiledAlert], list[CompiledAlert]]:
        matched: list[CompiledAlert] = []
        need_labels: list[CompiledAlert] = []
        for (compiled, result), ok in zip(candidates, allowed, strict=True):
            if ok:
                (matched if result is SourceMatch.YES else need_labels).append(compiled)
        if not matched and not need_labels:
            self._unmatched(
                event, event_id, "filtered out by every Alert" if candidates else "no Alert matches"
            )
            if log.isEnabledFor(logging.DEBUG):  # ``describe`` costs more than the check
                log.debug(
                    "discarding event, no alerts found for the involved object %s",
                    event.involved_object.describe(),
                )
        return matched, need_labels

    async def _match_labels(
        self, event: Event, candidates: list[CompiledAlert], event_id: str
    ) -> list[CompiledAlert]:
        """The label-selected candidates whose selector matches the involved object's labels. When the
        labels cannot be read, each candidate is counted as dropped (``label_lookup*``)."""
        obj = event.involved_object
        lookup = await self.labels.lookup(obj.api_version, obj.kind, obj.namespace, obj.name)
        if lookup.labels is None:
            for compiled in candidates:
                self._drop_for(compiled, lookup.drop_reason, event, event_id)
                if lookup.result is not LookupResult.REJECTED:  # Flux's Warning; never echo a bad reference
                    self.report.warn(
                        compiled.alert, "SourceFetchFailed", f"error getting source object {obj.describe()}"
                    )
            return []
        matched = [compiled for compiled in candidates if compiled.match_labels(event, lookup.labels)]
        if not matched:
            self._unmatched(event, event_id, "no Alert's label selector matches the object")
        return matched

    def _unmatched(self, event: Event, event_id: str, detail: str) -> None:
        self._unmatched_count.inc()
        history = self.report.history
        if history is not None:
            history.unmatched(event, event_id, detail)

    def _drop_all(self, candidates: Candidates, reason: DropReason, event: Event, event_id: str) -> None:
        for compiled, _ in candidates:
            self._drop_for(compiled, reason, event, event_id)

    def _drop_for(
        self, compiled: CompiledAlert, reason: DropReason | str, event: Event, event_id: str, detail: str = ""
    ) -> None:
        ref = compiled.alert.spec.provider_ref.name
        provider = self.store.provider(compiled.namespace, ref)
        ptype = str(provider.spec.type) if provider is not None else ""
        self.report.dropped(reason, ptype)
        history = self.report.history
        if history is not None:
            history.record(
                Outcome.DROPPED,
                event,
                event_id,
                alert=f"{compiled.namespace}/{compiled.name}",
                provider=f"{compiled.namespace}/{ref}",
                provider_type=ptype,
                stage=str(reason),
                detail=detail,
            )

    async def close(self) -> None:
        self.filters.close()  # the filter thread stops after the expression list it is on (filtering.py)
        await self.labels.close()


async def _after(first: Awaitable[None], later: Awaitable[list[CompiledAlert]] | None) -> list[CompiledAlert]:
    await first
    return await later if later is not None else []

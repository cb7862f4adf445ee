"""The involved object's labels for label-selected Alerts: a bounded cache in front of ``Cluster.get_metadata``.

Why it exists (issue 11, item 4): an Alert source with ``matchLabels`` needs the labels of the object an
event is about. Fetched once per event, a burst of 3,000 unauthenticated events made 3,000 API GETs through
the one client-side token bucket the receivers and the reconcilers share: webhooks answered 500 for a
minute and the notifications whose lookup failed were counted nowhere. Here:

* **cache**: labels are kept for ``ttl`` seconds (30 s: a label change reaches matching within that), a
  404 for ``negative_ttl`` (5 s: an object created just after its first event is seen soon); the cache is
  an LRU bounded at ``max_entries`` objects and keeps only labels (no annotations, which can be large);
* **single flight**: concurrent lookups of one object share one GET (a task owned by the cache, so a
  cancelled waiter does not cancel the others' answer);
* **budget**: at most ``concurrency`` GETs in flight, at most ``max_waiting`` distinct objects queued for
  one, and a lookup (queue + GET) that takes longer than ``timeout`` fails. So a burst for many distinct
  objects holds at most ``concurrency`` places in the client's token bucket: receivers, reconcilers and
  Events are served in between, and what does not fit is refused at once (``overload``) instead of queued
  for minutes;
* **never silent**: every lookup is counted in ``notification_label_lookups_total{result}``, every GET in
  ``notification_label_fetches_total{outcome}``; the dispatcher counts each notification that cannot be
  matched in ``notification_dropped_total`` (``label_lookup``, ``label_lookup_overload``,
  ``label_lookup_rejected``). Failures are logged at most once per ``LOG_INTERVAL`` per kind of failure.
* **no hostile lookups**: a reference that ``core.apiref.validate_object_ref`` refuses (malformed parts,
  the core group, Kubernetes' or the controller's own groups) never reaches the API (``rejected``).

Errors other than 404 are not cached: the next event asks again (still one GET at a time per object).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum

from ..core.apiref import InvalidReference, Use, validate_object_ref
from ..errors import ControllerError, KubeError
from ..lib.clock import Clock, SystemClock
from ..metrics import EventMetrics
from ..objects.base import Cluster
from ..settings import EventSettings

log = logging.getLogger(__name__)

LOG_INTERVAL = 10.0  # seconds between two log lines about the same kind of lookup failure

ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


@dataclass(frozen=True)
class LabelCacheLimits:
    """The bounds that are not flags (the flags are read from ``EventSettings``: ``--label-cache-*``)."""

    negative_ttl: float = 5.0  # seconds a 404 is remembered
    max_waiting: int = 512  # distinct objects queued for a GET; beyond: overload
    timeout: float = 10.0  # seconds for one lookup, queue included


class LookupResult(StrEnum):
    HIT = "hit"  # labels from the cache
    FETCHED = "fetched"  # labels from a GET made for this lookup
    SHARED = "shared"  # labels from a GET another lookup of the same object had in flight
    NOT_FOUND = "not_found"  # the object does not exist (404, fresh or cached)
    ERROR = "error"  # the API refused or failed
    TIMEOUT = "timeout"  # no answer within the lookup timeout (queue included)
    OVERLOAD = "overload"  # too many objects already waiting for a GET: not asked
    REJECTED = "rejected"  # an invalid object reference: never sent to the API


# The notification_dropped_total reason of a notification whose labels could not be read.
_DROP_REASONS = {
    LookupResult.NOT_FOUND: "label_lookup",
    LookupResult.ERROR: "label_lookup",
    LookupResult.TIMEOUT: "label_lookup",
    LookupResult.OVERLOAD: "label_lookup_overload",
    LookupResult.REJECTED: "label_lookup_rejected",
}


@dataclass(frozen=True)
class Lookup:
    """The outcome of one lookup: ``labels`` is None when they could not be read (see ``result``)."""

    result: LookupResult
    labels: dict[str, str] | None = None
    error: str = ""  # safe to log (a KubeError message or a validation message)

    @property
    def drop_reason(self) -> str:
        return _DROP_REASONS.get(self.result, "")


@dataclass
class _Entry:
    expires: float
    labels: dict[str, str] | None  # None: the object does not exist


def reference_problem(api_version: str, kind: str, namespace: str, name: str) -> str | None:
    """Why an involved-object reference must not be looked up, or None (issue 11, item 2).

    The single place where an event's ``involvedObject`` is checked before the lookup: the grammar of
    every part and the refusal policy of ``core.apiref`` for label sources (``Use.TARGET``: no core group,
    no Kubernetes or controller groups). The decision depends on the text only, never on the cluster.
    """
    if not name or name == "*":
        return "an involved object needs a name"
    try:
        validate_object_ref(api_version, kind, namespace, name, use=Use.TARGET)
    except InvalidReference as exc:
        return str(exc)
    return None


def _labels_of(metadata: object) -> dict[str, str]:
    meta = metadata.get("metadata") if isinstance(metadata, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(labels, dict):
        return {}
    return {str(k): str(v) for k, v in labels.items()}


class LabelCache:
    """Labels of involved objects, cached, single-flight and budgeted (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        metrics: EventMetrics,
        events: EventSettings | None = None,
        *,
        limits: LabelCacheLimits | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.cluster = cluster
        self.metrics = metrics
        events = events or EventSettings()
        self.ttl = events.label_cache_ttl  # 0 = no caching (single flight and budget still apply)
        self.max_entries = events.label_cache_size  # objects kept (LRU)
        self.limits = limits or LabelCacheLimits()
        self.clock = clock or SystemClock()
        self._entries: OrderedDict[ObjectKey, _Entry] = OrderedDict()
        self._inflight: dict[ObjectKey, asyncio.Task[Lookup]] = {}
        self._slots = asyncio.Semaphore(max(1, events.label_lookup_concurrency))  # GETs in flight at once
        self._waiting = 0  # fetches created and not yet holding a slot
        self._logged: dict[LookupResult, tuple[float | None, int]] = {}  # last report, failures since

    @property
    def size(self) -> int:
        """Objects cached now (a property, not ``__len__``: an empty cache must not be falsy)."""
        return len(self._entries)

    @property
    def waiting(self) -> int:
        return self._waiting

    async def lookup(self, api_version: str, kind: str, namespace: str, name: str) -> Lookup:
        """The labels of one object, from the cache or one (shared) GET; never raises a lookup failure."""
        problem = reference_problem(api_version, kind, namespace, name)
        if problem is not None:
            return self._done(Lookup(LookupResult.REJECTED, error=problem))
        key: ObjectKey = (api_version, kind, namespace, name)
        cached = self._cached(key)
        if cached is not None:
            return self._done(cached)
        task = self._inflight.get(key)
        shared = task is not None
        if task is None:
            if self._waiting >= self.limits.max_waiting:
                return self._done(
                    Lookup(LookupResult.OVERLOAD, error=f"{self._waiting} objects waiting for a lookup")
                )
            self._waiting += 1
            task = asyncio.get_running_loop().create_task(self._fetch(key), name="label-lookup")
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._fetched, key))
        result = await asyncio.shield(task)
        if shared and result.result is LookupResult.FETCHED:
            result = dataclasses.replace(result, result=LookupResult.SHARED)
        return self._done(result)

    def _cached(self, key: ObjectKey) -> Lookup | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self.clock.monotonic():
            del self._entries[key]
            self.metrics.label_cache_entries.set(len(self._entries))
            return None
        self._entries.move_to_end(key)
        if entry.labels is None:
            return Lookup(LookupResult.NOT_FOUND, error="not found (cached)")
        return Lookup(LookupResult.HIT, entry.labels)

    def _remember(self, key: ObjectKey, labels: dict[str, str] | None) -> None:
        ttl = self.ttl if labels is not None else self.limits.negative_ttl
        if ttl <= 0 or self.max_entries <= 0:
            return
        self._entries[key] = _Entry(self.clock.monotonic() + ttl, labels)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        self.metrics.label_cache_entries.set(len(self._entries))

    async def _fetch(self, key: ObjectKey) -> Lookup:
        """One GET under the budget; the answer fills the cache even if every waiter has gone."""
        queued = True
        try:
            async with asyncio.timeout(self.limits.timeout):
                async with self._slots:
                    queued = False
                    self._waiting -= 1
                    metadata = await self.cluster.get_metadata(*key)
        except TimeoutError:
            self.metrics.label_fetches.labels(outcome="timeout").inc()
            where = "waiting for a lookup slot" if queued else "waiting for the API server"
            return Lookup(LookupResult.TIMEOUT, error=f"timed out after {self.limits.timeout:g}s {where}")
        except KubeError as exc:
            if exc.not_found:
                self.metrics.label_fetches.labels(outcome="not_found").inc()
                self._remember(key, None)
                return Lookup(LookupResult.NOT_FOUND, error=str(exc))
            self.metrics.label_fetches.labels(outcome="error").inc()
            return Lookup(LookupResult.ERROR, error=str(exc))
        except ControllerError as exc:
            self.metrics.label_fetches.labels(outcome="error").inc()
            return Lookup(LookupResult.ERROR, error=str(exc))
        except Exception as exc:  # a bug in a Cluster adapter: counted and logged, never raised to waiters
            log.error("label lookup: %s", type(exc).__name__, exc_info=log.isEnabledFor(logging.DEBUG))
            self.metrics.label_fetches.labels(outcome="error").inc()
            return Lookup(LookupResult.ERROR, error=f"internal error: {type(exc).__name__}")
        finally:
            if queued:
                self._waiting -= 1
        self.metrics.label_fetches.labels(outcome="ok").inc()
        labels = _labels_of(metadata)
        self._remember(key, labels)
        return Lookup(LookupResult.FETCHED, labels)

    def _fetched(self, key: ObjectKey, task: asyncio.Task[Lookup]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]

    def _done(self, lookup: Lookup) -> Lookup:
        self.metrics.label_lookups.labels(result=lookup.result.value).inc()
        if lookup.labels is None and lookup.result is not LookupResult.NOT_FOUND:
            self._log_failure(lookup)
        return lookup

    def _log_failure(self, lookup: Lookup) -> None:
        now = self.clock.monotonic()
        last, suppressed = self._logged.get(lookup.result, (None, 0))
        if last is not None and now - last < LOG_INTERVAL:
            self._logged[lookup.result] = (last, suppressed + 1)
            return
        self._logged[lookup.result] = (now, 0)
        more = f" ({suppressed} more since the last report)" if suppressed else ""
        log.warning(
            "label lookup for a label-selected Alert failed (%s): %s%s",
            lookup.result.value,
            lookup.error,
            more,
        )

    async def close(self) -> None:
        """Cancel the GETs still in flight (shutdown)."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._inflight.clear()

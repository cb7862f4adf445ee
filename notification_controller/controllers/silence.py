"""The Silence reconciler (issue 26 item 1): a Silence's status says what it does, and when.

A Silence (``api/silence.py``) is read by the silence stage (``dispatch/quiet/silences.py``) straight from the
object cache; this reconciler only tells the operator what the controller makes of it, in ``status``:

======================================  ==============================================================
``state``, ``startsAt``, ``endsAt``     Pending / Active / Expired and the resolved window (``startsAt``
                                        defaults to the creation time; ``duration`` becomes ``endsAt``)
``held``                                how many notifications it held, every Alert and every replica
                                        together (the store's ``quiet/silence-held/<ns>/<name>/<uid>``,
                                        written by the stage); read while Active at most every
                                        ``held_refresh()`` seconds (10 s, longer when there are many
                                        Silences), and once more when it expires
Ready=True  reason = the state          "active until …", "pending: starts at …", "expired at …"
Ready=False ValidationFailed            the spec breaks a rule (every error listed, each naming its
                                        field) + Stalled=True: it holds nothing until edited
Ready=False AllNamespacesNotAllowed     ``spec.allNamespaces`` outside ``--cluster-silences-namespace``:
                                        it holds the Alerts of its own namespace only, and says so
======================================  ==============================================================

Time drives it, not only changes: each reconcile asks to run again exactly at the next transition (the
start, the end, the end of retention), so ``state`` flips on time and a Normal Event ``Active`` / ``Expired``
is recorded at each transition (from the status written before: a restart does not repeat them).

Retention (``--silence-retention``, default 24h, 0 keeps them): an Expired Silence is deleted that long
after its end, with its uid as a precondition (a new Silence of the same name is never touched), as
Alertmanager garbage-collects expired silences. In a cluster that is the object (RBAC: ``delete`` on
``silences``, nothing else). In local mode the files are the operator's: only a file the ``silence`` CLI
wrote (annotation ``notification-controller.io/created-by-cli: "true"``, one document) is removed; a
Silence of any other file is kept, and the loader's ``LocalCluster.delete`` refuses it (logged once).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from ..api.common import Condition, ConditionStatus
from ..api.silence import Silence, SilenceState, SilenceStatus
from ..core import conditions as cond
from ..errors import KubeError, StoreError
from ..lib.clock import rfc3339
from ..objects.base import Change, Key, ObjectRef
from .alert import field_of, joined
from .base import DONE, ConditionsDraft, Reconciler, Result, spec_or_meta_changed
from .events import NORMAL

log = logging.getLogger(__name__)

ALL_NAMESPACES_NOT_ALLOWED = "AllNamespacesNotAllowed"
HELD_REFRESH = 10.0
"""Seconds between two reads of an Active Silence's held count (so at most one status write per Silence per
10 s for it, whatever the event rate)."""
HELD_READS_PER_SECOND = 50.0
"""Held-count reads (and the reconciles that make them) per second, all Silences together, at most: Silences
are a tenant's to create, so 10,000 of them refresh every 200 s, not 1,000 reconciles a second."""
MAX_CREATED_BY = 256
MAX_COMMENT = 1024
"""The CRD's bounds of ``spec.createdBy`` and ``spec.comment``; checked here for local mode, where no API
server applies them (the model carries them only as schema)."""

HeldCount = Callable[[Silence], Awaitable[int]]
"""How many notifications a Silence held (``dispatch/quiet/held.py``'s ``held_total`` over the store)."""


def silence_errors(silence: Silence) -> list[str]:
    """Every error of ``silence``'s spec, each starting with its field (``spec.matchers[0].value …``); what
    ``check`` reports too (a manifest's creation time is the API server's to set, so a missing window is the
    reconciler's own check)."""
    spec = silence.spec
    errors = spec.validation_errors()
    if spec.created_by is not None and len(spec.created_by) > MAX_CREATED_BY:
        errors.append(f"spec.createdBy is longer than {MAX_CREATED_BY} characters")
    if spec.comment is not None and len(spec.comment) > MAX_COMMENT:
        errors.append(f"spec.comment is longer than {MAX_COMMENT} characters")
    if not errors and spec.starts_at is not None:
        window = silence.window()
        # equal is a Silence that has ended (``silence expire`` within the second of ``add``): not an error
        if window is not None and window[1] < window[0]:
            errors.append("spec.endsAt must not be before spec.startsAt")
    return errors


def reconcile_errors(silence: Silence) -> list[str]:
    """``silence_errors``, and a window the controller can compute (an object with a creation time or a
    ``startsAt``)."""
    errors = silence_errors(silence)
    if not errors and silence.window() is None:
        errors.append(
            "spec.startsAt is required when the object has no creation time (local mode: a file has none)"
        )
    return errors


def all_namespaces_error(silence: Silence, cluster_namespace: str) -> str | None:
    """Why ``spec.allNamespaces`` is not honoured for ``silence`` (None: it is, or it is not set)."""
    if not silence.spec.all_namespaces:
        return None
    own = silence.metadata.namespace
    if not cluster_namespace:
        return (
            "spec.allNamespaces is ignored: cluster-wide Silences are off (the controller's "
            f"--cluster-silences-namespace is not set); this Silence holds the Alerts of namespace '{own}' only"
        )
    if own != cluster_namespace:
        return (
            f"spec.allNamespaces is ignored: only a Silence in namespace '{cluster_namespace}' (the controller's "
            f"--cluster-silences-namespace) holds the Alerts of every namespace; this Silence holds the Alerts "
            f"of namespace '{own}' only"
        )
    return None


def state_message(state: SilenceState, starts: datetime, ends: datetime) -> str:
    if state is SilenceState.PENDING:
        return f"pending: starts at {rfc3339(starts)}, ends at {rfc3339(ends)}"
    if state is SilenceState.ACTIVE:
        return f"active until {rfc3339(ends)}"
    return f"expired at {rfc3339(ends)}"


def next_transition(
    state: SilenceState, starts: datetime, ends: datetime, now: datetime, retention: float
) -> datetime | None:
    """When the state changes next: the start, the end, or (retention > 0) the end of retention."""
    if state is SilenceState.PENDING:
        return starts
    if state is SilenceState.ACTIVE:
        return ends
    if retention > 0:
        return ends + timedelta(seconds=retention)
    return None


class SilenceReconciler(Reconciler[Any]):
    """See the module docstring. Not ``base.TemplateReconciler``: a Silence has no finalizer, no ``suspend``
    and no hooks; its status is its own (``SilenceStatus``)."""

    kind = "Silence"
    watched_kind = "Silence"  # nothing else: a Silence references no other object
    logger = log
    status_type = SilenceStatus

    def __init__(
        self,
        *args: Any,
        retention: float = 24 * 3600.0,
        cluster_namespace: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.retention = retention
        self.cluster_namespace = cluster_namespace
        self.held_count: HeldCount | None = None
        """Set by the app with the store the silence stage counts in (None: ``status.held`` stays 0)."""
        self._kept: set[tuple[str, str, str]] = set()  # (ns, name, uid) whose deletion was refused: said once
        self._held_read: dict[Key, float] = {}  # monotonic time of the last held read, per Silence
        self._known: set[Key] = set()  # every Silence of the store (what paces the held refresh)

    def held_refresh(self) -> float:
        """Seconds between two held-count reads of one Active Silence (``HELD_READS_PER_SECOND``)."""
        return max(HELD_REFRESH, len(self._known) / HELD_READS_PER_SECOND)

    # ---- the contract with the manager -------------------------------------------------------------
    def references(self, obj: Any) -> Iterable[Key]:
        return ()

    def watch(self, change: Change) -> list[Key]:
        if change.kind != self.kind:
            return []
        key = (change.namespace, change.name)
        if change.obj is None:
            self._forget(key)
        else:
            self._known.add(key)
        return [key] if spec_or_meta_changed(change) else []

    def prime(self, keys: Iterable[Key] | None = None) -> None:
        self._known.update(self.object_keys() if keys is None else keys)

    def _forget(self, key: Key) -> None:
        self._known.discard(key)
        self._held_read.pop(key, None)
        self._kept = {k for k in self._kept if k[:2] != key} if self._kept else self._kept

    def load(self, key: Key) -> Silence | None:
        return self.store.silence(*key)

    async def reconcile(self, key: Key) -> Result:
        silence = self.load(key)
        if silence is None or silence.metadata.deletion_timestamp is not None:
            if silence is None:
                self._forget(key)
            return DONE
        now = self.clock.now()
        conditions = ConditionsDraft(silence.status.conditions)
        errors = reconcile_errors(silence)
        if errors:
            message = joined(errors)
            conditions.mark_false(cond.READY, cond.VALIDATION_FAILED, message)
            conditions.mark_stalled(cond.VALIDATION_FAILED, message)
            self.logger.info("%s is invalid (%s): %s", self.describe(silence), field_of(errors[0]), message)
            built = await self._write(silence, conditions, None, None, None, silence.status.held)
            await self._report_ready(silence, built)
            return DONE

        window = silence.window()
        assert window is not None  # silence_errors says so otherwise
        starts, ends = window
        state = silence.state(now)
        assert state is not None
        if state is SilenceState.EXPIRED and self.retention > 0:
            if now >= ends + timedelta(seconds=self.retention) and await self._delete(silence):
                return DONE

        held = await self._held(silence, state, key)
        conditions.delete(cond.STALLED)
        conditions.delete(cond.RECONCILING)
        why = all_namespaces_error(silence, self.cluster_namespace)
        if why is not None:
            conditions.mark_false(cond.READY, ALL_NAMESPACES_NOT_ALLOWED, why)
        else:
            conditions.mark_true(cond.READY, state.value, state_message(state, starts, ends))
        built = await self._write(silence, conditions, state, starts, ends, held)
        await self._transition_event(silence, state, starts, ends)
        await self._report_ready(silence, built)

        due = next_transition(state, starts, ends, now, self.retention)
        if state is SilenceState.EXPIRED and due is not None and due <= now:
            due = None  # past retention and kept (local mode): nothing will happen any more
        delay = None if due is None else max((due - now).total_seconds(), 0.0)
        if state is SilenceState.ACTIVE and self.held_count is not None:
            refresh = self.held_refresh()
            delay = refresh if delay is None else min(delay, refresh)
        return Result(requeue_after=delay) if delay is not None else DONE

    # ---- steps ------------------------------------------------------------------------------------
    async def _held(self, silence: Silence, state: SilenceState, key: Key) -> int:
        """The held count: read while Active (every ``held_refresh()`` s at most) and at each other reconcile
        (the transition to Expired reads the final one); the stored one when the store cannot say."""
        if self.held_count is None or state is SilenceState.PENDING:
            return silence.status.held
        mono = self.clock.monotonic()
        last = self._held_read.get(key)
        if state is SilenceState.ACTIVE and last is not None and mono - last < self.held_refresh() * 0.9:
            return silence.status.held  # a change of the object, between two refreshes
        self._held_read[key] = mono
        try:
            return max(await self.held_count(silence), silence.status.held)
        except StoreError as exc:
            log.debug("%s: held count unavailable: %s", self.describe(silence), exc)
            return silence.status.held

    async def _write(
        self,
        silence: Silence,
        conditions: ConditionsDraft,
        state: SilenceState | None,
        starts: datetime | None,
        ends: datetime | None,
        held: int,
    ) -> list[Condition]:
        meta = silence.metadata
        built = conditions.build(generation=meta.generation, now=self.clock.now())
        desired = SilenceStatus(
            conditions=built,
            observed_generation=meta.generation,
            state=state,
            held=held,
            starts_at=starts,
            ends_at=ends,
        )
        await self.write_status(silence, desired)
        return built

    async def _transition_event(
        self, silence: Silence, state: SilenceState, starts: datetime, ends: datetime
    ) -> None:
        """A Normal Event when the state written becomes Active or Expired (not again after a restart: the
        previous state is the stored status)."""
        if state is silence.status.state or state is SilenceState.PENDING:
            return
        await self.recorder.event(
            ObjectRef.of(silence), NORMAL, state.value, f"Silence {state_message(state, starts, ends)}"
        )

    async def _report_ready(self, silence: Silence, after: list[Condition]) -> None:
        """A Warning when Ready turns False (or its reason/message changes); nothing for Ready=True (the
        state Events say it)."""
        old, new = cond.find(silence.status.conditions, cond.READY), cond.find(after, cond.READY)
        if new is None or new.status != ConditionStatus.FALSE:
            return
        if old is not None and (old.status, old.reason, old.message) == (new.status, new.reason, new.message):
            return
        await self.warn(silence, new.reason, new.message)

    async def _delete(self, silence: Silence) -> bool:
        """Delete an expired Silence past retention. True: deleted (or already gone); False: kept."""
        meta = silence.metadata
        kept = (meta.namespace, meta.name, meta.uid)
        if kept in self._kept:
            return False
        try:
            await self.cluster.delete(ObjectRef.of(silence))
        except KubeError as exc:
            if exc.not_found or exc.conflict:  # gone, or another object of that name now
                return True
            if exc.status == 405:  # local mode: not a file the silence CLI wrote (LocalCluster.delete)
                self._kept.add(kept)
                log.info("%s expired and is kept: %s", self.describe(silence), exc)
                return False
            raise
        log.info(
            "%s expired at %s and was deleted (--silence-retention %ss)",
            self.describe(silence),
            rfc3339(self._ends(silence)),
            f"{self.retention:g}",
        )
        self._forget((meta.namespace, meta.name))
        return True

    @staticmethod
    def _ends(silence: Silence) -> datetime:
        window = silence.window()
        assert window is not None
        return window[1]

"""What the reconcilers share: the reconcile template, the condition draft, status and finalizer writes.

``Reconciler`` is what the manager calls (``reconcile``, ``watch``, ``prime``) and the reverse index of
references. ``TemplateReconciler.reconcile`` is the one reconcile the three Flux kinds run; a kind states
only what differs, in the hooks it overrides (``load``, ``children``, ``evaluate``; ``left_alone``,
``ensure_finalizers``, ``finalizers_removed``, ``report`` where the default does not fit). A Silence has no
finalizer, ``suspend`` or hooks: ``SilenceReconciler`` derives from ``Reconciler`` and writes its own.

A reconcile reads one object from the ``ObjectStore``, computes its *desired* status (a pure step: the
conditions a Flux controller would hold in memory at the end of ``Reconcile``), and hands the side effects
to the ``Cluster`` port: finalizers, one status patch — only when the desired status differs from the
current one, so a resync of a converged object writes nothing (checklist D13) — and Kubernetes Events
through the ``EventRecorder``. ``observedGeneration`` and ``lastHandledReconcileAt`` are set here, by the
shared ``finish`` step (Flux's deferred patch, reference §6.3), never by the kind-specific code.

Hooks API v1 (docs/hooks.md) plugs in here too: ``run_pre_reconcile`` calls the ``pre-reconcile`` hooks
once the kind's own checks made the object Ready and folds their conditions into the draft (a hook error
writes nothing and retries with backoff, as a sync handler's error does); ``sync_finalizers`` and
``finalize`` manage Flux's finalizer and the hooks' one (``HOOKS_FINALIZER``) in single writes, and hold a
deleted object until every ``finalize`` hook answered 2xx.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from ..api import FINALIZER, RECONCILE_REQUEST_ANNOTATION
from ..api.alert import Alert
from ..api.common import Condition, ConditionStatus, ObjectStatus
from ..api.hooks import HOOKS_FINALIZER, HookCapability
from ..api.objects import Object
from ..api.provider import Provider
from ..api.receiver import Receiver
from ..core import conditions as cond
from ..core.redact import Redactor
from ..errors import KubeError
from ..lib.clock import Clock
from ..logsetup import fields, object_fields
from ..objects.base import Change, Cluster, Key, ObjectRef, ObjectStore
from .events import NORMAL, WARNING, EventRecorder

if TYPE_CHECKING:
    from ..hooks.reconcile import ReconcileHooks

log = logging.getLogger(__name__)

TERMINAL_PREFIX = "Reconciliation failed terminally due to configuration error: "
RECONCILING_MESSAGE = "Reconciliation in progress"

ObjT = TypeVar("ObjT", Alert, Provider, Receiver)


@dataclass(frozen=True)
class Result:
    """What the work queue does next with the key (controller-runtime's ``ctrl.Result`` + error).

    * ``error``: a transient failure (already reported in status/Events): counted, retried with backoff;
    * ``requeue``: retry with backoff without counting an error (e.g. right after adding the finalizer);
    * ``requeue_after``: reconcile again after that many seconds (the backoff is reset);
    * none of them: done until the object or something it references changes (or the periodic resync).
    """

    requeue_after: float | None = None
    requeue: bool = False
    error: str | None = None


DONE = Result()


@dataclass(frozen=True)
class HookStep:
    """What the ``pre-reconcile`` hooks decided (docs/hooks.md, "pre-reconcile in the reconcilers").

    * ``result`` replaces the kind's own result when set;
    * ``write_status`` False: a non-permanent hook error — nothing is written, the key is retried with
      backoff (sync-handler semantics: an error changes nothing);
    * ``warning``: (reason, message) for kinds that do not derive Events from Ready transitions.
    """

    result: Result | None = None
    write_status: bool = True
    warning: tuple[str, str] | None = None


CONTROLLER_CONDITIONS = frozenset({cond.READY, cond.RECONCILING, cond.STALLED})


class ConditionsDraft:
    """In-memory condition edits, applied at the end against the *original* conditions.

    Flux edits conditions in memory during a reconcile and patches once. Building the final list against the
    conditions read at the start means ``lastTransitionTime`` only moves when a condition's final
    status/reason/message differs from what was stored, and untouched conditions keep their
    ``observedGeneration``.
    """

    def __init__(self, original: Sequence[Condition]) -> None:
        self._original = list(original)
        self._state: dict[str, tuple[ConditionStatus, str, str]] = {
            c.type: (c.status, c.reason, c.message) for c in original
        }
        self._touched: set[str] = set()

    def set(self, type_: str, status: ConditionStatus, reason: str, message: str) -> None:
        self._state[type_] = (status, reason, message)
        self._touched.add(type_)

    def mark_true(self, type_: str, reason: str, message: str) -> None:
        self.set(type_, ConditionStatus.TRUE, reason, message)

    def mark_false(self, type_: str, reason: str, message: str) -> None:
        self.set(type_, ConditionStatus.FALSE, reason, message)

    def delete(self, type_: str) -> None:
        self._state.pop(type_, None)
        self._touched.discard(type_)

    def get(self, type_: str) -> tuple[ConditionStatus, str, str] | None:
        return self._state.get(type_)

    def has(self, type_: str) -> bool:
        return type_ in self._state

    def is_true(self, type_: str) -> bool:
        value = self._state.get(type_)
        return value is not None and value[0] == ConditionStatus.TRUE

    def is_false(self, type_: str) -> bool:
        value = self._state.get(type_)
        return value is not None and value[0] == ConditionStatus.FALSE

    def mark_reconciling(self, reason: str = cond.PROGRESSING, message: str = RECONCILING_MESSAGE) -> None:
        """``conditions.MarkReconciling``: Reconciling=True, and Stalled removed."""
        self.mark_true(cond.RECONCILING, reason, message)
        self.delete(cond.STALLED)

    def mark_stalled(self, reason: str, message: str) -> None:
        """``conditions.MarkStalled``: Stalled=True, and Reconciling removed."""
        self.mark_true(cond.STALLED, reason, message)
        self.delete(cond.RECONCILING)

    def build(self, *, generation: int, now: datetime) -> list[Condition]:
        out = [c for c in self._original if c.type in self._state]
        if not self._touched:
            return out
        for type_ in sorted(self._touched):  # set_condition keeps Flux's order (Stalled, Reconciling, Ready)
            status, reason, message = self._state[type_]
            out = cond.set_condition(out, type_, status, reason, message, generation=generation, now=now)
        return out


@dataclass
class StatusDraft:
    """The Flux status fields common to the three kinds, being computed."""

    conditions: ConditionsDraft
    observed_generation: int
    last_handled_reconcile_at: str | None
    extra: dict[str, str | None] = field(default_factory=dict)
    """The kind's status fields beyond Flux's common three, by field name (a Receiver's ``webhook_path``)."""

    def mark_terminal(self, reason: str, error: str, generation: int) -> str:
        """Flux's ``markTerminal``: Ready=False and Stalled=True with the same reason and message."""
        message = TERMINAL_PREFIX + error
        self.conditions.mark_false(cond.READY, reason, message)
        self.conditions.mark_stalled(reason, message)
        self.observed_generation = generation
        return message

    def mark_stalled_by_hook(self, message: str, generation: int) -> None:
        """A permanent hook error: Ready=False and Stalled=True, reason ``HookFailed`` (not retried)."""
        self.conditions.mark_false(cond.READY, cond.HOOK_FAILED, message)
        self.conditions.mark_stalled(cond.HOOK_FAILED, message)
        self.observed_generation = generation

    def finish(self, annotations: dict[str, str], generation: int) -> None:
        """Flux's deferred ``patch`` step (reference §6.3)."""
        if RECONCILE_REQUEST_ANNOTATION in annotations:
            self.last_handled_reconcile_at = annotations[RECONCILE_REQUEST_ANNOTATION]
        if self.conditions.is_true(cond.READY):
            self.conditions.delete(cond.RECONCILING)
            self.observed_generation = generation
        reconciling = self.conditions.get(cond.RECONCILING)
        if self.conditions.is_false(cond.READY) and reconciling is not None:
            self.conditions.set(cond.RECONCILING, reconciling[0], cond.PROGRESSING_WITH_RETRY, reconciling[2])


def spec_or_meta_changed(change: Change) -> bool:
    """Flux's ``GenerationChanged OR ReconcileRequested`` predicate, plus finalizer/deletion changes.

    A status-only update (our own status patch coming back through the watch) returns False, so writing
    status never triggers another reconcile of the same object.
    """
    old, new = change.old, change.obj
    if old is None or new is None or type(old) is not type(new):
        return True
    om, nm = old.metadata, new.metadata
    if om.uid != nm.uid or om.generation != nm.generation:
        return True
    if getattr(old, "spec", None) != getattr(new, "spec", None):
        return True
    if om.annotations.get(RECONCILE_REQUEST_ANNOTATION) != nm.annotations.get(RECONCILE_REQUEST_ANNOTATION):
        return True
    return om.finalizers != nm.finalizers or om.deletion_timestamp != nm.deletion_timestamp


class ReverseIndex:
    """Which of our objects reference which other objects (Secrets, Providers), kept both ways.

    An object's references are a tuple (an Alert's one Provider: 48 bytes, where a frozenset took 216,
    issue 17), and setting the same ones again (a status write) changes nothing."""

    def __init__(self) -> None:
        self._refs: dict[Key, tuple[Key, ...]] = {}
        self._users: dict[Key, set[Key]] = {}

    def set(self, key: Key, refs: Iterable[Key]) -> None:
        distinct = tuple(dict.fromkeys(refs))
        if self._refs.get(key, ()) == distinct:
            return
        self.remove(key)
        if distinct:
            self._refs[key] = distinct
            for ref in distinct:
                self._users.setdefault(ref, set()).add(key)

    def remove(self, key: Key) -> None:
        for ref in self._refs.pop(key, ()):
            users = self._users.get(ref)
            if users is not None:
                users.discard(key)
                if not users:
                    del self._users[ref]

    def users(self, ref: Key) -> list[Key]:
        return sorted(self._users.get(ref, ()))


class Reconciler(abc.ABC, Generic[ObjT]):
    """Base of every reconciler: what the manager calls (``reconcile``, ``watch``, ``prime``), the reverse
    index of references, reads from the store, status writes through the Cluster port."""

    kind: ClassVar[str]
    watched_kind: ClassVar[str]  # the kind whose changes re-enqueue the objects referencing it
    logger: ClassVar[logging.Logger]  # the kind's module logger: the template's log lines come from it
    status_type: ClassVar[type[BaseModel]] = ObjectStatus  # what ``commit_draft`` writes

    def __init__(
        self,
        store: ObjectStore,
        cluster: Cluster,
        recorder: EventRecorder,
        clock: Clock,
        *,
        redactor: Redactor | None = None,
        hooks: ReconcileHooks | None = None,
        no_cross_namespace_refs: bool = False,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.recorder = recorder
        self.clock = clock
        self.redact = redactor if redactor is not None else Redactor()
        self.hooks = hooks  # Hooks API v1 (pre-reconcile, finalize); None: no hooks at all
        self.status_writes = 0  # for tests and debugging: how many status patches were sent
        self.writes_status = True  # False: --alert-provider-status=false (Flux's v1beta3 has no status there)
        self.index = ReverseIndex()
        self.no_cross_namespace_refs = no_cross_namespace_refs  # --no-cross-namespace-refs (Alert's sources)

    # ---- the contract with the manager -------------------------------------------------------------
    @abc.abstractmethod
    async def reconcile(self, key: Key) -> Result:
        """Bring one object to its desired state. Never raises for a bad object (only for I/O errors)."""

    @abc.abstractmethod
    def load(self, key: Key) -> ObjT | None:
        """The object from the store, or None when it is gone."""

    @abc.abstractmethod
    def references(self, obj: ObjT) -> Iterable[Key]:
        """Keys (namespace, name) of the ``watched_kind`` objects ``obj`` points at."""

    def watch(self, change: Change) -> list[Key]:
        """Keys of this kind to reconcile because of ``change`` (and keep the reverse index current)."""
        key = (change.namespace, change.name)
        if change.kind == self.kind:
            if change.obj is not None:
                self.index.set(key, self.references(change.obj))  # type: ignore[arg-type]
            else:
                self.index.remove(key)
            return [key] if spec_or_meta_changed(change) else []
        if change.kind == self.watched_kind:
            return self.index.users(key)
        return []

    def referencing(self, ref: Key) -> list[Key]:
        return self.index.users(ref)

    def prime(self, keys: Iterable[Key] | None = None) -> None:
        """Index the objects already in the store (those that arrived before we subscribed): ``keys`` (of
        ``object_keys``), or all of them."""
        for key in self.object_keys() if keys is None else keys:
            obj = self.store.get(self.kind, *key)
            if obj is not None:
                self.index.set(key, self.references(obj))  # type: ignore[arg-type]

    def object_keys(self) -> list[Key]:
        return self.store.keys(self.kind)

    # ---- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def has_finalizer(obj: Object) -> bool:
        return FINALIZER in obj.metadata.finalizers

    def status_draft(self, obj: ObjT) -> StatusDraft:
        """The status this reconcile starts from (a kind with more status fields adds them to ``extra``)."""
        status: Any = obj.status
        return StatusDraft(
            ConditionsDraft(status.conditions), status.observed_generation, status.last_handled_reconcile_at
        )

    async def commit_draft(self, obj: ObjT, draft: StatusDraft) -> list[Condition]:
        """Every reconcile's last step: finish the draft, write the status (a ``status_type``, if it changed)
        and return the new conditions (for the Ready-transition Event)."""
        meta = obj.metadata
        draft.finish(meta.annotations, meta.generation)
        conditions = draft.conditions.build(generation=meta.generation, now=self.clock.now())
        desired = self.status_type(
            conditions=conditions,
            observed_generation=draft.observed_generation,
            last_handled_reconcile_at=draft.last_handled_reconcile_at,
            **draft.extra,
        )
        await self.write_status(obj, desired)
        return conditions

    async def write_status(self, obj: ObjT, desired: BaseModel) -> bool:
        """Patch the status only if it differs from the stored one. Returns True if a patch was sent."""
        if not self.writes_status:
            return False
        # An empty string means "unset" (e.g. webhookPath after TokenNotFound): normalise before comparing.
        empty = {name: None for name, value in desired if value == ""}
        if empty:
            desired = desired.model_copy(update=empty)
        if desired == obj.status:
            return False
        body = desired.model_dump(by_alias=True, mode="json", exclude_none=True)
        # Fields set before and unset now are cleared with an explicit null (merge-patch semantics).
        for name, info in type(desired).model_fields.items():
            if getattr(desired, name) is None and getattr(obj.status, name, None) is not None:
                body[info.alias or name] = None
        try:
            await self.cluster.patch_status(ObjectRef.of(obj), body)
        except KubeError as exc:
            if exc.not_found:  # deleted meanwhile; the deletion is reconciled separately
                return False
            raise
        self.status_writes += 1
        return True

    async def ready_transition_event(
        self, obj: ObjT, before: Sequence[Condition], after: Sequence[Condition], ready_message: str
    ) -> None:
        """Events for the kinds Flux gives no status (Alert, Provider): one per change of Ready only.

        A converged object resynced every 10 minutes emits nothing; a failing one emits one Warning
        when it starts failing (and again if the reason or message changes), one Normal when it recovers.
        """
        old, new = cond.find(before, cond.READY), cond.find(after, cond.READY)
        if new is None or new.status == ConditionStatus.UNKNOWN:
            return
        if old is not None and (old.status, old.reason, old.message) == (new.status, new.reason, new.message):
            return
        if new.status == ConditionStatus.TRUE:
            await self.recorder.event(ObjectRef.of(obj), NORMAL, new.reason, ready_message)
        else:
            await self.warn(obj, new.reason, new.message)

    def mark_terminal(self, obj: ObjT, draft: StatusDraft, reason: str, error: str) -> str:
        """``StatusDraft.mark_terminal`` and a warning log line saying why. Returns the condition message."""
        message = draft.mark_terminal(reason, error, obj.metadata.generation)
        self.logger.warning("%s: %s", self.describe(obj), message)
        return message

    async def warn(self, obj: ObjT, reason: str, message: str) -> None:
        await self.recorder.event(ObjectRef.of(obj), WARNING, reason, message)

    @staticmethod
    def describe(obj: Object) -> str:
        return f"{obj.KIND}/{obj.metadata.namespace}/{obj.metadata.name}"

    @staticmethod
    def log_fields(obj: Object, error: str = "") -> dict[str, dict[str, object]]:
        """Flux's structured keys for a log line about ``obj`` (``extra=``)."""
        return fields(**object_fields(obj.KIND, obj.metadata.namespace, obj.metadata.name, error=error))


class TemplateReconciler(Reconciler[ObjT]):
    """The reconcile every Flux kind runs (Alert, Provider, Receiver): finalizers, ``suspend``, the kind's
    ``evaluate``, the Hooks API's ``pre-reconcile`` and ``finalize`` hooks, one status write, the Events. A
    kind with none of these (``SilenceReconciler``) derives from ``Reconciler`` and writes its own."""

    suspended_log: ClassVar[str] = "Reconciliation is suspended for this object: %s"
    ready_message: ClassVar[str] = ""  # the Normal Event of the default ``report`` when Ready turns True

    async def reconcile(self, key: Key) -> Result:
        """Bring one object to its desired state. Never raises for a bad object (only for I/O errors).

        The template every kind runs: gone → forget it; deleted → ``finalize``; else finalizers, then (unless
        suspended) the kind's ``evaluate`` and the ``pre-reconcile`` hooks, one status write, the Events.
        """
        obj = self.load(key)
        if obj is None:
            self.index.remove(key)
            return DONE
        if obj.metadata.deletion_timestamp is not None:
            result, removed = await self.finalize(obj, self.children(obj, self.status_draft(obj)))
            await self.finalizers_removed(obj, removed)
            return result
        if self.left_alone(obj):
            return DONE

        draft = self.status_draft(obj)
        hook_warning: tuple[str, str] | None = None
        if await self.ensure_finalizers(obj):
            result = Result(requeue=True)
        elif obj.spec.suspend:
            self.logger.info(self.suspended_log, self.describe(obj))
            result = DONE
        else:
            result = await self.evaluate(obj, draft)
            step = await self.run_pre_reconcile(obj, draft, self.children(obj, draft))
            if not step.write_status:
                return step.result or DONE
            result, hook_warning = step.result or result, step.warning

        conditions = await self.commit_draft(obj, draft)
        await self.report(obj, result, hook_warning, conditions)
        return result

    # ---- what each kind states (the template's hooks) ----------------------------------------------
    @abc.abstractmethod
    def children(self, obj: ObjT, draft: StatusDraft) -> dict[str, Any]:
        """What the hooks are told of ``obj``'s children, as of ``draft`` (at deletion: the stored status)."""

    @abc.abstractmethod
    async def evaluate(self, obj: ObjT, draft: StatusDraft) -> Result:
        """The kind's own checks of a live, not suspended object: its conditions go into ``draft``."""

    def left_alone(self, obj: ObjT) -> bool:
        """True: this reconcile writes nothing at all, not even finalizers. By default never."""
        return False

    async def ensure_finalizers(self, obj: ObjT) -> bool:
        """Flux's finalizer and the hooks' one, in one write. True: they were just added, so this reconcile
        ends there (status still written) and the key is requeued, as Flux does."""
        return await self.sync_finalizers(obj, flux=True) is not None

    async def finalizers_removed(self, obj: ObjT, removed: list[str]) -> None:
        """After ``finalize`` dropped ``removed`` from a deleted object. By default nothing."""

    async def report(
        self, obj: ObjT, result: Result, hook_warning: tuple[str, str] | None, conditions: list[Condition]
    ) -> None:
        """The Events after the status write. By default one per change of Ready (``ready_transition_event``);
        ``hook_warning`` (``HookStep.warning``) is for kinds that do not derive Events from Ready."""
        await self.ready_transition_event(obj, obj.status.conditions, conditions, self.ready_message)

    # ---- finalizers (Flux's and the hooks') --------------------------------------------------------
    def wants_hooks_finalizer(self, obj: ObjT) -> bool:
        return self.hooks is not None and self.hooks.applies(obj, HookCapability.FINALIZE)

    async def sync_finalizers(self, obj: ObjT, *, flux: bool) -> list[str] | None:
        """Give ``obj`` exactly the finalizers it needs (Flux's when ``flux``; the hooks' when a ``finalize``
        hook applies), in one write, keeping everyone else's. Returns what was written (None: nothing)."""
        current = list(obj.metadata.finalizers)
        want = {FINALIZER: flux, HOOKS_FINALIZER: self.wants_hooks_finalizer(obj)}
        desired = [f for f in current if want.get(f, True)]
        desired += [f for f, wanted in want.items() if wanted and f not in desired]
        if desired == current:
            return None
        await self.cluster.set_finalizers(ObjectRef.of(obj), desired, obj.metadata.resource_version)
        return desired

    async def finalize(self, obj: ObjT, children: dict[str, Any]) -> tuple[Result, list[str]]:
        """Deletion: run the ``finalize`` hooks (if ``obj`` carries their finalizer), then drop our finalizers
        in one write. A hook that did not answer 2xx keeps the object (Warning ``HookFailed``, retried with
        backoff; a ``permanent`` error is not retried, see ``_deletion_stalled``). Returns the result and the
        finalizers removed."""
        finalizers = obj.metadata.finalizers
        if HOOKS_FINALIZER in finalizers and self.wants_hooks_finalizer(obj):
            assert self.hooks is not None
            failed = await self.hooks.finalize(obj, children)
            if failed is not None:
                hook, error = failed
                if error.permanent:
                    where = "the --hooks-config file" if hook.origin == "controller" else "spec.hooks"
                    return await self._deletion_stalled(obj, str(error), hook.name, where), []
                message = self.redact(f"deletion blocked: {error}")
                log.error("%s: %s", self.describe(obj), message, extra=self.log_fields(obj, message))
                await self.warn(obj, cond.HOOK_FAILED, message)
                return Result(error=message), []
        remaining = [f for f in finalizers if f not in (FINALIZER, HOOKS_FINALIZER)]
        if remaining == list(finalizers):
            return DONE, []
        try:
            await self.cluster.set_finalizers(ObjectRef.of(obj), remaining, obj.metadata.resource_version)
        except KubeError as exc:
            if not exc.not_found:  # already gone: nothing left to do
                raise
        return DONE, [f for f in finalizers if f not in remaining]

    async def _deletion_stalled(self, obj: ObjT, error: str, hook: str, where: str) -> Result:
        """A ``finalize`` hook answered ``permanent: true`` ("retrying will not help", docs/hooks.md): no retry.
        Ready=False and Stalled=True ``HookFailed`` and a Warning Event say what the user can do; a new
        ``reconcile.fluxcd.io/requestedAt`` (or a spec change) asks the hooks again."""
        message = self.redact(
            f"deletion blocked: {error}; the error is permanent, so it is not retried: remove hook '{hook}' "
            f"from {where} (or 'finalize' from its capabilities) to let the deletion go on, or fix the cause "
            f"and annotate the object with {RECONCILE_REQUEST_ANNOTATION} to try again"
        )
        log.error("%s: %s", self.describe(obj), message, extra=self.log_fields(obj, message))
        draft = self.status_draft(obj)
        draft.mark_stalled_by_hook(message, obj.metadata.generation)
        await self.commit_draft(obj, draft)
        await self.warn(obj, cond.HOOK_FAILED, message)
        return DONE

    # ---- pre-reconcile hooks ----------------------------------------------------------------------
    async def run_pre_reconcile(self, obj: ObjT, draft: StatusDraft, children: dict[str, Any]) -> HookStep:
        """Call the ``pre-reconcile`` hooks once the controller's own checks made the object Ready.

        Hook conditions go into the draft; a non-True one → Ready=False with its reason and message
        (retried with backoff); a permanent error without ``continue`` → Ready=False/Stalled ``HookFailed``;
        a non-permanent one → nothing written, Warning ``HookFailed``, retried with backoff.
        """
        if self.hooks is None or not draft.conditions.is_true(cond.READY):
            return HookStep()
        if not self.hooks.applies(obj, HookCapability.PRE_RECONCILE):
            # No hook answers for this object any more: drop the conditions hooks had set.
            for condition in obj.status.conditions:
                if condition.type not in CONTROLLER_CONDITIONS:
                    draft.conditions.delete(condition.type)
            return HookStep()
        outcome = await self.hooks.pre_reconcile(obj, children)
        if outcome.failure is not None:
            message = self.redact(str(outcome.failure))
            if not outcome.failure.permanent:
                log.error(
                    "%s: %s; retrying with backoff",
                    self.describe(obj),
                    message,
                    extra=self.log_fields(obj, message),
                )
                await self.warn(obj, cond.HOOK_FAILED, message)
                return HookStep(result=Result(error=message), write_status=False)
            draft.mark_stalled_by_hook(message, obj.metadata.generation)
            return HookStep(result=DONE, warning=(cond.HOOK_FAILED, message))
        for returned in outcome.conditions:
            draft.conditions.set(
                returned.type, returned.status, returned.reason, self.redact(returned.message)
            )
        if outcome.veto is not None:
            message = self.redact(outcome.veto.message)
            draft.conditions.mark_false(cond.READY, outcome.veto.reason, message)
            return HookStep(result=Result(requeue=True), warning=(outcome.veto.reason, message))
        return HookStep()

"""Inhibition (issue 26 item 5): while a source or a dependency is failing, the error notifications of
what depends on it are held, then named in one line of the source's recovery (docs/silences.md,
"Inhibition").

One failing GitRepository makes every Kustomization and HelmRelease built from it fail, and each notifies
(fluxcd/notification-controller#1370: a DNS blip, dozens of messages). Two ways to say who depends on whom:

* ``spec.inhibitDependents: true``: Flux's own graph (``objects/graph.py``: ``sourceRef``, ``dependsOn``,
  transitively). An error notification of an object one of whose upstream objects is *failing* is held
  (``Drop(inhibited, "inhibited by GitRepository/ns/name (failing since …)")``).
* ``spec.inhibitRules``: Alertmanager's ``inhibit_rules`` over events. A notification matching a rule's
  ``targetMatchers`` is held while an object whose last error event matched its ``sourceMatchers`` is still
  failing and the ``equal`` fields have the same values in both (an object never inhibits itself).

*Failing* means: the object's last event was an error and no other event came since. The controller sees
a source's events whether or not an Alert matches them: ``observe`` (``observe.py``; the matcher calls it
for every event, one set lookup when no Alert uses inhibition) records it in the store's KV
(``failing.py``: the records, keys and bounds), so it holds across restarts (SQLite) and replicas (NATS):

* ``quiet/failing/<digest(Kind/ns/name)>``: the failure (since when, its reason) of an object some
  tracked object depends on (only those: an event storm about 10,000 invented GitRepositories writes
  nothing). It lives ``FAILING_TTL`` (24 h) after the first error, so a source that stops reporting
  (deleted, its controller gone) stops inhibiting then; a source that keeps failing is recorded again by its
  next error.
* ``quiet/failing/rule/<digest(alert, rule, equal values)>``: the objects failing for one rule and one set
  of ``equal`` values (at most ``MAX_RULE_OBJECTS``); at most ``MAX_RULE_KEYS`` per Alert in this process.
* ``quiet/inhibited/<digest(Kind/ns/name)>``: what was held under one failing object, per Alert (at most
  ``MAX_ALERTS_PER_SOURCE`` Alerts and ``MAX_HELD_OBJECTS`` names each; the rest counted).

Release. When the failing object's recovery (any event that is not an error) goes through the same Alert,
this stage claims the Alert's part of the record (compare-and-set) and appends one line to it: "Held while
it failed: Kustomization/ns/a, Kustomization/ns/b, …" (``Draft.message``, and the event's metadata
``heldWhileFailing`` for the types that forward the event as is). An Alert that does not take the recovery
(``eventSeverity: error``, a source it does not list) gets a notification of its own ``RELEASE_DELAY``
seconds later (``run``, ``release.py``): "GitRepository/ns/repo recovered; held while it failed: …", with
an id derived from the record so that two replicas store it once. Whichever claims the record first says
it; never both.

Everything a tenant or an unauthenticated client chooses is bounded (records, lists, the walk of the
graph); past a cap, or when the store cannot be reached, the notification is let through and counted in
``notification_inhibit_untracked_total{reason}``: a notification too many is better than one lost.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable

from ...api.event import SEVERITY_ERROR
from ...core.noise import ObjectState, Suppressed
from ...core.quiet import EventFields
from ...errors import StoreError
from ...lib.clock import Clock, SystemClock
from ...metrics import InhibitMetrics
from ...objects.base import ObjectStore
from ...objects.graph import GRAPH_KINDS, GraphSource, Node, describe
from ...providers.message import Message
from ...store.base import KVEntry, Store
from ..model import Draft, Drop
from .failing import (
    HELD_METADATA,
    HELD_TTL,
    ErrorFields,
    Full,
    Held,
    RuleFailing,
    alert_id,
    failing_key,
    held_key,
    held_line,
    node_of,
    parse_node,
    rule_key,
    stamp,
    update,
)
from .observe import Failures
from .release import Enqueue, Releases

log = logging.getLogger(__name__)

MAX_UPSTREAM_READS = 64
"""Upstream objects whose failure is read per held candidate (the nearest first)."""


class Inhibition:
    """The observer (``observe``, every event), the pre-queue stage (``__call__``) and the releases
    (``run``) over one ``Store`` and one graph (see the module docstring)."""

    name = "quiet-inhibit"

    def __init__(
        self,
        state: Store,
        objects: ObjectStore,
        graph: GraphSource,
        clock: Clock | None = None,
        *,
        metrics: InhibitMetrics | None = None,
        tick: float = 0.5,
    ) -> None:
        self.state = state
        self.graphs = graph
        self.clock = clock or SystemClock()
        self.metrics = metrics
        self.tick = tick
        self.store_errors = 0
        self.releases = Releases(state, objects, self.clock, self._store_failed)
        self.failures = Failures(
            state, objects, graph, self.clock, self.releases, self._untracked, self._store_failed
        )
        self.observe = self.failures.observe
        """Every event, matched or not (the matcher calls it): the failures and recoveries."""

    # ---- the stage ----------------------------------------------------------------------------------------
    def __call__(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        spec = draft.alert.spec
        if not spec.inhibit_dependents and not spec.inhibit_rules:
            return draft
        return self._decide(draft)

    async def _decide(self, draft: Draft) -> Draft | Drop:
        try:
            if draft.event.severity == SEVERITY_ERROR:
                return await self._hold(draft)
            return await self._name_held(draft)
        except StoreError as exc:
            self._store_failed("stage", exc)
            return draft

    async def _hold(self, draft: Draft) -> Draft | Drop:
        found = await self._failing_upstream(draft)
        if found is None:
            return draft
        source, since = found
        me, owner = describe(node_of(draft.event)), alert_id(draft.alert)

        def step(entry: KVEntry | None) -> tuple[bytes, float] | None:
            record = Held.from_bytes(entry.value) if entry is not None else Held(since, {})
            new = record.with_object(owner, me)
            return (new.to_bytes(), HELD_TTL) if new is not None else None

        try:
            await update(self.state, held_key(source), step)
        except Full as full:
            self._untracked(str(full))
            return draft
        why = f"inhibited by {describe(source)} (failing since {stamp(since)})"
        return Drop(Suppressed.INHIBITED, why, suppressed=True)

    async def _failing_upstream(self, draft: Draft) -> tuple[Node, float] | None:
        """The failing object ``draft``'s object depends on (graph or rules), and since when."""
        event, spec = draft.event, draft.alert.spec
        node = node_of(event)
        if spec.inhibit_dependents and node[0] in GRAPH_KINDS:
            graph = self.graphs.graph()
            failing: dict[Node, float] = {}
            for up in graph.upstream(node, MAX_UPSTREAM_READS):
                entry = await self.state.kv_get(failing_key(up))
                state = ObjectState.from_bytes(entry.value) if entry is not None else None
                if state is not None and state.failing:
                    failing[up] = state.since
            # the root cause: a failing object that depends on no other failing one (apps failing because
            # repo fails: its dependents are held under repo, named in repo's recovery); in a cycle, the
            # nearest
            for up, since in failing.items():
                if not any(other in failing for other in graph.upstream(up, MAX_UPSTREAM_READS)):
                    return up, since
            if failing:
                return next(iter(failing.items()))
        compiled_rules = self.failures.rules.get(alert_id(draft.alert))
        if compiled_rules is None:
            return None
        fields = EventFields(event, draft.alert.metadata.name, spec.provider_ref.name)
        me = describe(node)
        for index, rule in enumerate(compiled_rules[1]):
            if not rule.target(fields):
                continue
            values = [fields.get(name, "") for name in rule.equal]
            entry = await self.state.kv_get(rule_key(alert_id(draft.alert), index, values))
            for obj, since in RuleFailing.from_bytes(entry.value).objects if entry is not None else ():
                if obj != me:  # an object never inhibits itself (Alertmanager's rule)
                    return parse_node(obj), since
        return None

    async def _name_held(self, draft: Draft) -> Draft:
        """A recovery of an object under which this Alert held notifications: claim them, name them."""
        node = node_of(draft.event)
        if not self._may_have_held(draft, node):
            return draft
        owner = alert_id(draft.alert)
        claimed: list[tuple[tuple[str, ...], int]] = []

        def claim(entry: KVEntry | None) -> tuple[bytes, float] | None:
            claimed.clear()
            record = Held.from_bytes(entry.value) if entry is not None else None
            if record is None or owner not in record.alerts:
                return None
            claimed.append(record.alerts[owner])
            rest = {k: v for k, v in record.alerts.items() if k != owner}
            return Held(record.since, rest).to_bytes(), HELD_TTL

        if not await update(self.state, held_key(node), claim):
            return draft
        listed = held_line(*claimed[0])
        event = draft.event.model_copy(update={"metadata": {**draft.event.metadata, HELD_METADATA: listed}})
        base = draft.message or Message.of(draft.event)
        line = f"Held while it failed: {listed}"
        text = f"{base.text}\n{line}" if base.text else line
        message = dataclasses.replace(base, text=text, fields=(*base.fields, (HELD_METADATA, listed)))
        return dataclasses.replace(draft, event=event, message=message)

    def _may_have_held(self, draft: Draft, node: Node) -> bool:
        """Cheap: whether ``node`` can be a failing object for this Alert (a read otherwise)."""
        spec = draft.alert.spec
        if spec.inhibit_dependents and node[0] in GRAPH_KINDS and self.graphs.graph().referenced(node):
            return True
        compiled_rules = self.failures.rules.get(alert_id(draft.alert))
        if compiled_rules is None:
            return False
        fields = ErrorFields(draft.event, draft.alert.metadata.name, spec.provider_ref.name)
        return any(rule.source(fields) for rule in compiled_rules[1])

    # ---- releases and accounting -------------------------------------------------------------------------
    async def release_due(self, enqueue: Enqueue) -> int:
        return await self.releases.due(enqueue)

    async def run(self, enqueue: Enqueue) -> None:
        await self.releases.run(enqueue, self.tick)

    def _untracked(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.untracked.labels(reason=reason).inc()
        log.debug("inhibition: %s reached; the notification goes through", reason)

    def _store_failed(self, where: str, exc: StoreError) -> None:
        self.store_errors += 1
        if self.metrics is not None:
            self.metrics.untracked.labels(reason="store_error").inc()
        log.warning("inhibition %s: state store unavailable, notifying anyway: %s", where, exc)

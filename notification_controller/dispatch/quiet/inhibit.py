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
a source's events whether or not an Alert matches them: ``observe`` (called by the dispatcher for every
event before matching, one set lookup when no Alert uses inhibition) records it in the store's KV,
so it holds across restarts (SQLite) and replicas (NATS):

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
seconds later (``run``): "GitRepository/ns/repo recovered; held while it failed: …", with an id derived from
the record so that two replicas store it once. Whichever claims the record first says it; never both.

Everything a tenant or an unauthenticated client chooses is bounded (records, lists, the walk of the
graph); past a cap, or when the store cannot be reached, the notification is let through and counted in
``notification_inhibit_untracked_total{reason}``: a notification too many is better than one lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from ...api.alert import Alert, InhibitRule
from ...api.event import SEVERITY_ERROR, Event
from ...core.noise import ObjectState, Suppressed, digest
from ...core.quiet import EventFields, Fields, Predicate, compiled
from ...errors import StoreError
from ...lib.clock import Clock, SystemClock
from ...lib.deadlines import Deadlines
from ...metrics import InhibitMetrics
from ...objects.base import Change, ObjectStore
from ...objects.graph import GRAPH_KINDS, GraphSource, Node, describe
from ...providers.message import Message
from ...store.base import Store
from ..model import Draft, Drop, Notification, Ref

log = logging.getLogger(__name__)

FAILING_TTL = 24 * 3600.0
"""How long a failure inhibits after the object's first error without a newer event (a source that never
recovers does not inhibit forever)."""
RECOVERED_TTL = 600.0
"""How long the record of a recovery is kept (so a late duplicate of the error is still seen as new)."""
HELD_TTL = FAILING_TTL + 3600.0
RELEASE_DELAY = 2.0
"""Seconds after a recovery before the Alerts that did not take it get a release notification of their
own (the stage that takes it claims the record first)."""
MAX_HELD_OBJECTS = 20
MAX_ALERTS_PER_SOURCE = 32
MAX_RULE_OBJECTS = 32
MAX_RULE_KEYS = 1000
"""Rule records (sets of ``equal`` values) one Alert may create in this process before the next ones are
let through (an unauthenticated event chooses the values)."""
MAX_UPSTREAM_READS = 64
"""Upstream objects whose failure is read per held candidate (the nearest first)."""
MAX_PENDING_RELEASES = 10_000
CAS_ATTEMPTS = 8
HELD_METADATA = "heldWhileFailing"
"""Metadata key of a recovery naming what was held (for the types that forward the event as is)."""

Enqueue = Callable[[Notification], Awaitable[None]]


def failing_key(node: Node) -> str:
    return "quiet/failing/" + digest(describe(node))


def held_key(node: Node) -> str:
    return "quiet/inhibited/" + digest(describe(node))


def rule_key(alert_id: str, index: int, values: Sequence[str]) -> str:
    return "quiet/failing/rule/" + digest(alert_id, str(index), *values)


def alert_id(alert: Alert) -> str:
    return f"{alert.metadata.namespace}/{alert.metadata.name}"


def node_of(event: Event) -> Node:
    obj = event.involved_object
    return (obj.kind, obj.namespace, obj.name)


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def held_line(objects: Sequence[str], more: int) -> str:
    listed = ", ".join(objects)
    return listed + (f" and {more} more" if more else "")


# ---- records (plain data, bytes in the KV) ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Held:
    """What was held under one failing object: per Alert id, the objects (first ``MAX_HELD_OBJECTS``) and
    how many more."""

    since: float
    alerts: dict[str, tuple[tuple[str, ...], int]]

    def to_bytes(self) -> bytes:
        raw = {"s": self.since, "a": {k: [list(o), m] for k, (o, m) in self.alerts.items()}}
        return bytes(memoryview(orjson.dumps(raw)))

    @classmethod
    def from_bytes(cls, data: bytes) -> Held:
        raw = orjson.loads(data)
        alerts = {str(k): (tuple(str(o) for o in v[0]), int(v[1])) for k, v in dict(raw.get("a", {})).items()}
        return cls(float(raw.get("s", 0.0)), alerts)

    def with_object(self, alert: str, obj: str) -> Held | None:
        """The record with ``obj`` held for ``alert``; None when nothing changes or ``alert`` does not fit."""
        objects, more = self.alerts.get(alert, ((), 0))
        if obj in objects:
            return None
        if alert not in self.alerts and len(self.alerts) >= MAX_ALERTS_PER_SOURCE:
            raise _Full("alert_limit")
        if len(objects) < MAX_HELD_OBJECTS:
            objects = (*objects, obj)
        else:
            more += 1  # an upper bound: a name past the list held twice is counted twice
        return Held(self.since, {**self.alerts, alert: (objects, more)})


@dataclasses.dataclass(frozen=True)
class RuleFailing:
    """The objects failing for one rule and one set of ``equal`` values: (Kind/ns/name, since)."""

    objects: tuple[tuple[str, float], ...] = ()

    def to_bytes(self) -> bytes:
        return bytes(memoryview(orjson.dumps([list(o) for o in self.objects])))

    @classmethod
    def from_bytes(cls, data: bytes) -> RuleFailing:
        return cls(tuple((str(o), float(s)) for o, s in orjson.loads(data)))


class _Full(Exception):
    """A bounded record has no room: the notification goes through (counted)."""


def _parse_node(text: str) -> Node:
    kind, _, rest = text.partition("/")
    namespace, _, name = rest.partition("/")
    return (kind, namespace, name)


class _Fields(EventFields):
    """An event's fields with ``severity`` read as ``error``: would this object's error match a rule's
    ``sourceMatchers``? (A recovery must end what its error started.)"""

    __slots__ = ()

    def __getitem__(self, key: str) -> str:
        return SEVERITY_ERROR if key == "severity" else super().__getitem__(key)


@dataclasses.dataclass(frozen=True)
class _Rule:
    source: Predicate
    target: Predicate
    equal: tuple[str, ...]


# ---- the stage ---------------------------------------------------------------------------------------------
class Inhibition:
    """The observer (``observe``, every event), the pre-queue stage (``__call__``) and the releaser
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
        self.objects = objects
        self.graphs = graph
        self.clock = clock or SystemClock()
        self.metrics = metrics
        self.tick = tick
        self.dependents: set[str] = set()
        """Alert ids with ``spec.inhibitDependents``: the graph's failures are observed while any exists."""
        self.rules: dict[str, tuple[Alert, tuple[_Rule, ...]]] = {}
        """Alert id -> its ``spec.inhibitRules``, compiled."""
        self._rule_keys: dict[str, Deadlines] = {}
        self._releases = Deadlines()  # Kind/ns/name of a recovered object -> when to release
        self._recoveries: dict[str, Event] = {}  # ... and its recovery event
        self.store_errors = 0
        for alert in objects.alerts():
            self._alert(alert_id(alert), alert)
        objects.subscribe(self._on_change)

    # ---- which Alerts use it ------------------------------------------------------------------------------
    def _on_change(self, change: Change) -> None:
        if change.kind == "Alert":
            obj = change.obj
            self._alert(f"{change.namespace}/{change.name}", obj if isinstance(obj, Alert) else None)

    def _alert(self, key: str, alert: Alert | None) -> None:
        spec = alert.spec if alert is not None else None
        if spec is not None and spec.inhibit_dependents:
            self.dependents.add(key)
        else:
            self.dependents.discard(key)
        if alert is not None and spec is not None and spec.inhibit_rules:
            previous = self.rules.get(key)
            if previous is None or previous[0].spec.inhibit_rules != spec.inhibit_rules:
                self.rules[key] = (alert, tuple(_compile(r) for r in spec.inhibit_rules))
            else:
                self.rules[key] = (alert, previous[1])
        else:
            self.rules.pop(key, None)

    @property
    def active(self) -> bool:
        return bool(self.dependents or self.rules)

    def now(self) -> float:
        return self.clock.now().timestamp()

    # ---- observing every event ----------------------------------------------------------------------------
    def observe(self, event: Event) -> Coroutine[Any, Any, None] | None:
        """Record the failure or the recovery of the event's object when some Alert may need it (the
        dispatcher calls this for every event, matched or not). None: nothing to do."""
        if not self.dependents and not self.rules:
            return None
        node = node_of(event)
        # only what a tracked object depends on is recorded: an event about anything else costs no task
        graph = bool(self.dependents) and node[0] in GRAPH_KINDS and self.graphs.graph().referenced(node)
        failing = event.severity == SEVERITY_ERROR
        sources: list[tuple[str, int, _Rule, Fields]] = []
        for key, (alert, rules) in self.rules.items():  # the rules whose sourceMatchers this object matches
            fields = (EventFields if failing else _Fields)(
                event, alert.metadata.name, alert.spec.provider_ref.name
            )
            sources.extend((key, i, rule, fields) for i, rule in enumerate(rules) if rule.source(fields))
        if not graph and not sources:
            return None
        return self._observe(node, event, failing, graph, sources)

    async def _observe(
        self,
        node: Node,
        event: Event,
        failing: bool,
        graph: bool,
        sources: list[tuple[str, int, _Rule, Fields]],
    ) -> None:
        recovered = False
        try:
            if graph:
                recovered = await self._observe_failing(node, event, failing)
            for key, index, rule, fields in sources:
                recovered |= await self._observe_rule(key, index, rule, fields, node, failing)
        except StoreError as exc:
            self._store_failed("observe", exc)
            return
        except Exception as exc:  # a bug here must not fail the event's answer (durable stores await this)
            log.error("inhibition: observing %s failed: %s", describe(node), type(exc).__name__)
            return
        if recovered:
            self._schedule_release(node, event)

    async def _observe_failing(self, node: Node, event: Event, failing: bool) -> bool:
        """Write the object's failure (first error) or its recovery; True for a recovery."""
        key = failing_key(node)
        for _ in range(CAS_ATTEMPTS):
            entry = await self.state.kv_get(key)
            previous = ObjectState.from_bytes(entry.value) if entry is not None else None
            was_failing = previous is not None and previous.failing
            if failing == was_failing or (not failing and previous is None):
                return False
            now = self.now()
            if failing:
                value, ttl = ObjectState(True, event.reason[:256], event.message[:256], now), FAILING_TTL
            else:
                value, ttl = ObjectState(False, event.reason[:256], "", now), RECOVERED_TTL
            expected = entry.revision if entry is not None else None
            if await self.state.kv_cas(key, value.to_bytes(), expected=expected, ttl=ttl) is not None:
                return not failing
        raise StoreError(f"inhibition: {CAS_ATTEMPTS} concurrent writers on one key")

    async def _observe_rule(
        self, key: str, index: int, rule: _Rule, fields: Fields, node: Node, failing: bool
    ) -> bool:
        values = [fields.get(name, "") for name in rule.equal]
        record_key = rule_key(key, index, values)
        me = describe(node)
        now = self.now()
        if failing and not self._room(key, record_key, now):
            self._untracked("rule_limit")
            return False
        for _ in range(CAS_ATTEMPTS):
            entry = await self.state.kv_get(record_key)
            record = RuleFailing.from_bytes(entry.value) if entry is not None else RuleFailing()
            present = any(obj == me for obj, _ in record.objects)
            if failing:
                if present:
                    return False
                if len(record.objects) >= MAX_RULE_OBJECTS:
                    self._untracked("rule_limit")
                    return False
                new = RuleFailing((*record.objects, (me, now)))
            else:
                if not present:
                    return False
                new = RuleFailing(tuple(o for o in record.objects if o[0] != me))
            expected = entry.revision if entry is not None else None
            if await self.state.kv_cas(record_key, new.to_bytes(), expected=expected, ttl=FAILING_TTL):
                if failing:
                    self._rule_keys.setdefault(key, Deadlines()).set(record_key, now + FAILING_TTL)
                return not failing
        raise StoreError(f"inhibition: {CAS_ATTEMPTS} concurrent writers on one key")

    def _room(self, alert: str, record_key: str, now: float) -> bool:
        keys = self._rule_keys.get(alert)
        if keys is None or record_key in keys or len(keys) < MAX_RULE_KEYS:
            return True
        keys.expired(now)
        return len(keys) < MAX_RULE_KEYS

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
            return await self._release_in(draft)
        except StoreError as exc:
            self._store_failed("stage", exc)
            return draft

    async def _hold(self, draft: Draft) -> Draft | Drop:
        found = await self._failing_upstream(draft)
        if found is None:
            return draft
        source, since = found
        me = describe(node_of(draft.event))
        key = held_key(source)
        owner = alert_id(draft.alert)
        try:
            for _ in range(CAS_ATTEMPTS):
                entry = await self.state.kv_get(key)
                record = Held.from_bytes(entry.value) if entry is not None else Held(since, {})
                new = record.with_object(owner, me)
                if new is None:
                    break
                expected = entry.revision if entry is not None else None
                if await self.state.kv_cas(key, new.to_bytes(), expected=expected, ttl=HELD_TTL) is not None:
                    break
            else:
                raise StoreError(f"inhibition: {CAS_ATTEMPTS} concurrent writers on one key")
        except _Full as full:
            self._untracked(str(full))
            return draft
        return Drop(
            Suppressed.INHIBITED,
            f"inhibited by {describe(source)} (failing since {stamp(since)})",
            suppressed=True,
        )

    async def _failing_upstream(self, draft: Draft) -> tuple[Node, float] | None:
        """The nearest failing object ``draft``'s object depends on (graph or rules), and since when."""
        event, spec = draft.event, draft.alert.spec
        node = node_of(event)
        if spec.inhibit_dependents and node[0] in GRAPH_KINDS:
            graph = self.graphs.graph()
            failing: dict[Node, float] = {}
            for up in graph.upstream(node, MAX_UPSTREAM_READS):
                entry = await self.state.kv_get(failing_key(up))
                if entry is not None:
                    state = ObjectState.from_bytes(entry.value)
                    if state.failing:
                        failing[up] = state.since
            if failing:
                # the root cause: a failing object that depends on no other failing one (apps failing
                # because repo fails: its dependents are held under repo, named in repo's recovery)
                for up, since in failing.items():
                    if not any(other in failing for other in graph.upstream(up, MAX_UPSTREAM_READS)):
                        return up, since
                return next(iter(failing.items()))  # a cycle of failures: the nearest
        compiled_rules = self.rules.get(alert_id(draft.alert))
        if compiled_rules is None:
            return None
        provider = spec.provider_ref.name
        fields = EventFields(event, draft.alert.metadata.name, provider)
        me = describe(node)
        for index, rule in enumerate(compiled_rules[1]):
            if not rule.target(fields):
                continue
            values = [fields.get(name, "") for name in rule.equal]
            entry = await self.state.kv_get(rule_key(alert_id(draft.alert), index, values))
            if entry is None:
                continue
            for obj, since in RuleFailing.from_bytes(entry.value).objects:
                if obj != me:  # an object never inhibits itself (Alertmanager's rule)
                    return _parse_node(obj), since
        return None

    async def _release_in(self, draft: Draft) -> Draft:
        """A recovery of an object under which this Alert held notifications: claim them, name them."""
        node = node_of(draft.event)
        if not self._may_have_held(draft, node):
            return draft
        claimed = await self._claim(node, alert_id(draft.alert))
        if claimed is None:
            return draft
        objects, more = claimed
        line = f"Held while it failed: {held_line(objects, more)}"
        event = draft.event
        event = event.model_copy(
            update={"metadata": {**event.metadata, HELD_METADATA: held_line(objects, more)}}
        )
        base = draft.message or Message.of(draft.event)
        message = dataclasses.replace(
            base,
            text=f"{base.text}\n{line}" if base.text else line,
            fields=(*base.fields, (HELD_METADATA, held_line(objects, more))),
        )
        return dataclasses.replace(draft, event=event, message=message)

    def _may_have_held(self, draft: Draft, node: Node) -> bool:
        """Cheap: whether ``node`` can be a failing object for this Alert (a read otherwise)."""
        spec = draft.alert.spec
        if spec.inhibit_dependents and node[0] in GRAPH_KINDS and self.graphs.graph().referenced(node):
            return True
        compiled_rules = self.rules.get(alert_id(draft.alert))
        if compiled_rules is None:
            return False
        fields = _Fields(draft.event, draft.alert.metadata.name, spec.provider_ref.name)
        return any(rule.source(fields) for rule in compiled_rules[1])

    async def _claim(self, node: Node, owner: str | None) -> tuple[tuple[str, ...], int] | None:
        """Take ``owner``'s part of what was held under ``node`` (compare-and-set)."""
        key = held_key(node)
        for _ in range(CAS_ATTEMPTS):
            entry = await self.state.kv_get(key)
            if entry is None:
                return None
            record = Held.from_bytes(entry.value)
            if owner is None or owner not in record.alerts:
                return None
            rest = {k: v for k, v in record.alerts.items() if k != owner}
            written = await self.state.kv_cas(
                key, Held(record.since, rest).to_bytes(), expected=entry.revision, ttl=HELD_TTL
            )
            if written is not None:
                return record.alerts[owner]
        raise StoreError(f"inhibition: {CAS_ATTEMPTS} concurrent writers on one key")

    # ---- releases for the Alerts that did not take the recovery -------------------------------------------
    def _schedule_release(self, node: Node, event: Event) -> None:
        key = describe(node)
        if key not in self._recoveries and len(self._recoveries) >= MAX_PENDING_RELEASES:
            self._untracked("release_limit")
            return
        self._recoveries[key] = event
        self._releases.set(key, self.now() + RELEASE_DELAY)

    async def release_due(self, enqueue: Enqueue) -> int:
        """Send the release notification of every recovery due; how many were sent."""
        sent = 0
        for key in self._releases.expired(self.now()):
            event = self._recoveries.pop(key, None)
            if event is None:
                continue
            try:
                sent += await self._release(_parse_node(key), event, enqueue)
            except StoreError as exc:
                self._store_failed("release", exc)
        return sent

    async def _release(self, node: Node, event: Event, enqueue: Enqueue) -> int:
        key = held_key(node)
        for _ in range(CAS_ATTEMPTS):
            entry = await self.state.kv_get(key)
            if entry is None:
                return 0
            record = Held.from_bytes(entry.value)
            if not record.alerts:
                return 0
            claimed = await self.state.kv_cas(
                key, Held(record.since, {}).to_bytes(), expected=entry.revision, ttl=RECOVERED_TTL
            )
            if claimed is not None:
                break
        else:
            raise StoreError(f"inhibition: {CAS_ATTEMPTS} concurrent writers on one key")
        sent = 0
        for owner, (objects, more) in record.alerts.items():
            notification = self.release_notification(owner, node, event, objects, more, record.since)
            if notification is None:
                continue
            try:
                await enqueue(notification)
                sent += 1
            except StoreError as exc:
                self._store_failed("release", exc)
        return sent

    def release_notification(
        self, owner: str, node: Node, event: Event, objects: Sequence[str], more: int, since: float
    ) -> Notification | None:
        """The notification that names what ``owner`` held while ``node`` failed (None: the Alert or its
        Provider is gone)."""
        namespace, _, name = owner.partition("/")
        alert = self.objects.alert(namespace, name)
        if alert is None or alert.spec.suspend:
            return None
        provider = self.objects.provider(namespace, alert.spec.provider_ref.name)
        if provider is None:
            return None
        listed = held_line(objects, more)
        text = f"{describe(node)} recovered; held while it failed: {listed}"
        released = event.model_copy(
            update={
                "message": text,
                "severity": "info",
                "metadata": {**event.metadata, HELD_METADATA: listed},
            }
        )
        message = Message.of(released)
        return Notification(
            "inhibit-" + digest(owner, describe(node), repr(since)),
            released,
            Ref.of(alert),
            Ref.of(provider),
            str(provider.spec.type),
            message=dataclasses.replace(message, title=f"Released: {message.title}"),
        )

    async def run(self, enqueue: Enqueue) -> None:
        """Send due releases every ``tick`` until cancelled."""
        while True:
            await asyncio.sleep(self.tick)
            try:
                await self.release_due(enqueue)
            except Exception as exc:  # never let the releaser die: the next tick tries again
                log.error("inhibition: release failed: %s", type(exc).__name__)

    # ---- accounting ---------------------------------------------------------------------------------------
    def _untracked(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.untracked.labels(reason=reason).inc()
        log.debug("inhibition: %s reached; the notification goes through", reason)

    def _store_failed(self, where: str, exc: StoreError) -> None:
        self.store_errors += 1
        if self.metrics is not None:
            self.metrics.untracked.labels(reason="store_error").inc()
        log.warning("inhibition %s: state store unavailable, notifying anyway: %s", where, exc)


def _compile(rule: InhibitRule) -> _Rule:
    return _Rule(compiled(rule.source_matchers), compiled(rule.target_matchers), tuple(rule.equal or ()))

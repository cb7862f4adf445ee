"""Inhibition's observer (``quiet/inhibit.py`` says why): every event, matched or not, may be the failure or
the recovery of an object something depends on. ``observe`` answers synchronously when there is nothing to
record (no Alert uses inhibition; an object no tracked object depends on and no rule's ``sourceMatchers``
match: one set lookup), else a coroutine that records it in the store's KV and schedules the release of a
recovery (``quiet/release.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ...api.alert import Alert
from ...api.event import SEVERITY_ERROR, Event
from ...core.noise import ObjectState
from ...core.quiet import EventFields, Fields
from ...errors import StoreError
from ...lib.clock import Clock
from ...lib.deadlines import Deadlines
from ...objects.base import Change, ObjectStore
from ...objects.graph import GRAPH_KINDS, GraphSource, Node, describe
from ...store.base import KVEntry, Store
from .failing import (
    FAILING_TTL,
    MAX_RULE_KEYS,
    MAX_RULE_OBJECTS,
    RECOVERED_TTL,
    ErrorFields,
    Rule,
    RuleFailing,
    alert_id,
    failing_key,
    node_of,
    rule_key,
    update,
)
from .release import Releases

log = logging.getLogger(__name__)

Sources = list[tuple[str, int, Rule, Fields]]
"""(Alert id, rule index, rule, the event's fields) of the rules whose ``sourceMatchers`` an event matches."""


class Failures:
    """Which Alerts use inhibition, and the failures and recoveries of what they may depend on."""

    def __init__(
        self,
        state: Store,
        objects: ObjectStore,
        graph: GraphSource,
        clock: Clock,
        releases: Releases,
        untracked: Callable[[str], None],
        store_failed: Callable[[str, StoreError], None],
    ) -> None:
        self.state = state
        self.graphs = graph
        self.clock = clock
        self.releases = releases
        self._untracked = untracked
        self._store_failed = store_failed
        self.dependents: set[str] = set()
        """Alert ids with ``spec.inhibitDependents``: the graph's failures are observed while any exists."""
        self.rules: dict[str, tuple[Alert, tuple[Rule, ...]]] = {}
        """Alert id -> its ``spec.inhibitRules``, compiled."""
        self._rule_keys: dict[str, Deadlines] = {}
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
        if alert is None or spec is None or not spec.inhibit_rules:
            self.rules.pop(key, None)
            return
        previous = self.rules.get(key)
        unchanged = previous is not None and previous[0].spec.inhibit_rules == spec.inhibit_rules
        rules = (
            previous[1]
            if previous is not None and unchanged
            else tuple(Rule.of(r) for r in spec.inhibit_rules)
        )
        self.rules[key] = (alert, rules)

    def now(self) -> float:
        return self.clock.time()

    # ---- observing every event ----------------------------------------------------------------------------
    def observe(self, event: Event) -> Coroutine[Any, Any, None] | None:
        """Record the failure or the recovery of the event's object when some Alert may need it (the
        matcher calls this for every event, matched or not). None: nothing to do."""
        if not self.dependents and not self.rules:
            return None
        node = node_of(event)
        # only what a tracked object depends on is recorded: an event about anything else costs no task
        graph = bool(self.dependents) and node[0] in GRAPH_KINDS and self.graphs.graph().referenced(node)
        failing = event.severity == SEVERITY_ERROR
        sources: Sources = []
        for key, (alert, rules) in self.rules.items():  # the rules whose sourceMatchers this object matches
            fields = (EventFields if failing else ErrorFields)(
                event, alert.metadata.name, alert.spec.provider_ref.name
            )
            sources.extend((key, i, rule, fields) for i, rule in enumerate(rules) if rule.source(fields))
        if not graph and not sources:
            return None
        return self._observe(node, event, failing, graph, sources)

    async def _observe(self, node: Node, event: Event, failing: bool, graph: bool, sources: Sources) -> None:
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
        if recovered and not self.releases.schedule(node, event):
            self._untracked("release_limit")

    async def _observe_failing(self, node: Node, event: Event, failing: bool) -> bool:
        """Write the object's failure (first error) or its recovery; True for a recovery."""

        def step(entry: KVEntry | None) -> tuple[bytes, float] | None:
            previous = ObjectState.from_bytes(entry.value) if entry is not None else None
            if failing == (previous is not None and previous.failing) or (not failing and previous is None):
                return None
            if failing:
                return ObjectState(
                    True, event.reason[:256], event.message[:256], self.now()
                ).to_bytes(), FAILING_TTL
            return ObjectState(False, event.reason[:256], "", self.now()).to_bytes(), RECOVERED_TTL

        return await update(self.state, failing_key(node), step) and not failing

    async def _observe_rule(
        self, key: str, index: int, rule: Rule, fields: Fields, node: Node, failing: bool
    ) -> bool:
        """Add the object to (error) or remove it from (recovery) its rule record; True for a recovery."""
        record_key = rule_key(key, index, [fields.get(name, "") for name in rule.equal])
        me, now = describe(node), self.now()
        if failing and not self._room(key, record_key, now):
            self._untracked("rule_limit")
            return False
        full: list[bool] = []

        def step(entry: KVEntry | None) -> tuple[bytes, float] | None:
            record = RuleFailing.from_bytes(entry.value) if entry is not None else RuleFailing()
            present = any(obj == me for obj, _ in record.objects)
            if failing == present:
                return None
            if failing and len(record.objects) >= MAX_RULE_OBJECTS:
                full.append(True)
                return None
            if failing:
                return RuleFailing((*record.objects, (me, now))).to_bytes(), FAILING_TTL
            return RuleFailing(tuple(o for o in record.objects if o[0] != me)).to_bytes(), FAILING_TTL

        written = await update(self.state, record_key, step)
        if full:
            self._untracked("rule_limit")
        if written and failing:
            self._rule_keys.setdefault(key, Deadlines()).set(record_key, now + FAILING_TTL)
        return written and not failing

    def _room(self, alert: str, record_key: str, now: float) -> bool:
        keys = self._rule_keys.get(alert)
        if keys is None or record_key in keys or len(keys) < MAX_RULE_KEYS:
            return True
        keys.expired(now)
        return len(keys) < MAX_RULE_KEYS

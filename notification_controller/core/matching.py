"""Alert matching (reference §3.5), compiled once per Alert version.

``CompiledAlert`` is built when an Alert enters the store: sources get their default namespace and the
inclusion/exclusion lists are compiled with RE2 (linear time: no catastrophic backtracking, and the same
syntax as Flux's Go ``regexp``). The store indexes compiled alerts by ``(namespace, kind, name)`` of each source (name ``*`` for
wildcards), so an event only looks at Alerts that can match it, never at all of them (as Flux does).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import re2

from ..api.alert import Alert, EventSeverity
from ..api.event import Event


class SourceMatch(Enum):
    NO = 0
    YES = 1
    NEEDS_LABELS = 2  # everything matched; the involved object's labels must satisfy matchLabels


@dataclass(frozen=True, slots=True)
class CompiledSource:
    kind: str
    namespace: str
    name: str
    match_labels: dict[str, str] | None

    def match(self, event: Event, alert_severity: str) -> SourceMatch:
        obj = event.involved_object
        if obj.namespace != self.namespace or obj.kind != self.kind:
            return SourceMatch.NO
        if not (event.severity == alert_severity or alert_severity == EventSeverity.INFO):
            return SourceMatch.NO
        if self.name != "*" and self.name != obj.name:
            return SourceMatch.NO
        if self.match_labels is not None:
            return SourceMatch.NEEDS_LABELS
        return SourceMatch.YES

    def labels_match(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in (self.match_labels or {}).items())


@dataclass(frozen=True, slots=True)
class CompiledAlert:
    alert: Alert
    sources: tuple[CompiledSource, ...]
    inclusion: tuple[Any, ...]
    exclusion: tuple[Any, ...]
    invalid_inclusion: tuple[str, ...]
    invalid_exclusion: tuple[str, ...]
    has_inclusion_list: bool

    @property
    def namespace(self) -> str:
        return self.alert.metadata.namespace

    @property
    def name(self) -> str:
        return self.alert.metadata.name

    @property
    def severity(self) -> str:
        return str(self.alert.spec.event_severity)

    def index_keys(self) -> set[tuple[str, str, str]]:
        """(namespace, kind, name-or-*) of every source: the store's index keys for this Alert."""
        return {(s.namespace, s.kind, s.name) for s in self.sources}

    def match_sources(self, event: Event) -> SourceMatch:
        """YES if a source matches outright; NEEDS_LABELS if only label-selected sources could match."""
        needs_labels = False
        for source in self.sources:
            result = source.match(event, self.severity)
            if result is SourceMatch.YES:
                return result
            if result is SourceMatch.NEEDS_LABELS:
                needs_labels = True
        return SourceMatch.NEEDS_LABELS if needs_labels else SourceMatch.NO

    def match_labels(self, event: Event, labels: dict[str, str]) -> bool:
        return any(
            s.match(event, self.severity) is SourceMatch.NEEDS_LABELS and s.labels_match(labels)
            for s in self.sources
        )

    def message_allowed(self, message: str) -> bool:
        """Inclusion (any must match, if a list is given) then exclusion (any match excludes)."""
        if self.has_inclusion_list and not any(p.search(message) for p in self.inclusion):
            return False
        return not any(p.search(message) for p in self.exclusion)


def _compile_all(expressions: list[str] | None) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    good: list[Any] = []
    bad: list[str] = []
    for expr in expressions or []:
        try:
            good.append(re2.compile(expr))
        except re2.error:
            bad.append(expr)
    return tuple(good), tuple(bad)


def compile_alert(alert: Alert) -> CompiledAlert:
    ns = alert.metadata.namespace
    sources = tuple(
        CompiledSource(
            kind=str(src.kind),
            namespace=src.namespace or ns,
            name=src.name,
            match_labels=dict(src.match_labels) if src.match_labels is not None else None,
        )
        for src in alert.spec.event_sources
    )
    inclusion, bad_inc = _compile_all(alert.spec.inclusion_list)
    exclusion, bad_exc = _compile_all(alert.spec.exclusion_list)
    return CompiledAlert(
        alert=alert,
        sources=sources,
        inclusion=inclusion,
        exclusion=exclusion,
        invalid_inclusion=bad_inc,
        invalid_exclusion=bad_exc,
        has_inclusion_list=bool(alert.spec.inclusion_list),
    )

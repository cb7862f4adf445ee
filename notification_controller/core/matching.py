"""Alert matching (reference §3.5), compiled once per Alert spec.

``CompiledAlert`` is built when an Alert enters the store: sources get their default namespace and the
inclusion/exclusion lists are compiled with RE2 (linear time: no catastrophic backtracking, and the same
syntax as Flux's Go ``regexp``). The store indexes compiled alerts by ``(namespace, kind, name)`` of each source (name ``*`` for
wildcards), so an event only looks at Alerts that can match it, never at all of them (as Flux does).

Message filters are the one part of matching whose cost an Alert's author controls (issue 11 item 5), so:

* each list is compiled into one ``re2.Set``: one pass over the message answers "does any expression
  match" for the whole list (measured: 100 expressions × 100 KB, 13 ms one by one → 0.2 ms as a Set). When
  RE2 cannot build the Set within its memory budget, the expressions run one by one (same answer). Semantics
  are Flux's: inclusion = any expression matches, exclusion = any expression matches;
* the compiled lists are reused when an Alert changes but its lists do not (status writes, label edits):
  ``compile_alert(alert, previous)``; and Alerts with the same list share one compiled list (issue 17:
  lists are copied between Alerts, and 10,000 Alerts compiled ~20,000 RE2 programs at start-up, a third
  of the load time). The compiled lists are immutable, and RE2 matching on one program is thread-safe;
* ``filter_weight`` × message length is a worst-case estimate (bytes × RE2 program size: a DFA that
  thrashes costs about that) that the dispatcher uses to run heavy filters off the event loop;
* an Alert over the bounds of ``api/alert.py`` is not compiled at all: ``refused`` carries the reason, the
  dispatcher delivers nothing for it and the reconciler reports it (``Ready=False``).

RE2 writes "DFA out of memory" lines to stderr when a search falls back from its DFA; an Alert's author
could trigger them at will, on every event, so the expressions used for matching are compiled with
``log_errors`` off (and without captures, which a yes/no answer does not need). The reconciler's validity
check (``compile_error``) keeps RE2's parse error line: it runs once per change of the Alert.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import re2

from ..api.alert import Alert, AlertSpec, EventSeverity
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


def _options() -> Any:
    options = re2.Options()
    options.never_capture = True  # a yes/no answer needs no submatches
    options.log_errors = False  # no stderr line an Alert's author can trigger per event
    return options


_OPTIONS = _options()


def compile_error(expression: str) -> str | None:
    """Why RE2 cannot compile ``expression`` ("missing )", "invalid perl operator: (?<!"), or None.

    With RE2's default options: its "Error parsing" line on stderr (JSON with ``--log-encoding=json``) is
    written when the reconciler validates the Alert, once per change, never per event."""
    try:
        re2.compile(expression)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        reason, sep, _ = text.rpartition(": ")  # RE2 says "<reason>: <the offending part>"
        if sep and _ and _ in expression and ":" not in reason:
            return reason  # the expression itself is quoted by the caller
        return text[:200] or "invalid regular expression"
    return None


@dataclass(frozen=True, slots=True, weakref_slot=True)
class ExpressionList:
    """One inclusion or exclusion list, compiled: ``any_match`` says whether any valid expression matches."""

    expressions: tuple[str, ...]  # as written, valid or not (the reuse key)
    invalid: tuple[str, ...]  # those RE2 cannot compile: ignored, warned about at dispatch (Flux)
    weight: int  # sum of the RE2 program sizes of the valid ones: worst-case cost per message byte
    matcher: Any  # a compiled re2.Set, or None (then ``each``, or nothing when no expression is valid)
    each: tuple[Any, ...] = ()

    @property
    def empty(self) -> bool:
        return self.matcher is None and not self.each

    def any_match(self, text: bytes) -> bool:
        if self.matcher is not None:
            return self.matcher.Match(text) is not None
        return any(p.search(text) is not None for p in self.each)


_SHARED: weakref.WeakValueDictionary[tuple[str, ...], ExpressionList] = weakref.WeakValueDictionary()
"""Compiled lists by expressions, while an Alert holds them: the same list is compiled once."""


def compile_list(expressions: list[str] | None) -> ExpressionList:
    written = tuple(expressions or ())
    shared = _SHARED.get(written)
    if shared is not None:
        return shared
    compiled = _compile_list(written)
    _SHARED[written] = compiled
    return compiled


def _compile_list(written: tuple[str, ...]) -> ExpressionList:
    valid: list[Any] = []
    bad: list[str] = []
    for expr in written:
        try:
            valid.append(re2.compile(expr, _OPTIONS))
        except re2.error:
            bad.append(expr)
    weight = sum(p.programsize for p in valid)
    if not valid:
        return ExpressionList(written, tuple(bad), weight, None)
    # A Set even for one expression: ``Set.Match`` is one call into RE2 (0.70 µs on a 120-byte message
    # here), ``search`` goes through pyre2's Python generator first (0.92 µs).
    matcher = re2.Set.SearchSet(_OPTIONS)
    try:
        for p in valid:
            matcher.Add(p.pattern)
        matcher.Compile()
    except re2.error:  # the combined program does not fit RE2's memory budget: one by one
        return ExpressionList(written, tuple(bad), weight, None, tuple(valid))
    return ExpressionList(written, tuple(bad), weight, matcher)


_NOTHING = compile_list(None)


@dataclass(frozen=True, slots=True)
class CompiledAlert:
    alert: Alert
    sources: tuple[CompiledSource, ...]
    inclusion: ExpressionList
    exclusion: ExpressionList
    refused: str | None = None  # over the bounds of api/alert.py: matches no message, nothing compiled
    # Read for every candidate Alert of every event: plain slots filled once, not properties reading the
    # pydantic model each time (at 10,000 Alerts, about half an Alert per event is a candidate).
    namespace: str = field(init=False)
    name: str = field(init=False)
    severity: str = field(init=False)
    has_inclusion_list: bool = field(init=False)
    filter_weight: int = field(init=False)  # RE2 program sizes ``message_allowed`` runs: × bytes = worst case

    def __post_init__(self) -> None:
        meta = self.alert.metadata
        has_inclusion = bool(self.inclusion.expressions)
        weight = self.exclusion.weight + (self.inclusion.weight if has_inclusion else 0)
        for name, value in (
            ("namespace", meta.namespace),
            ("name", meta.name),
            ("severity", str(self.alert.spec.event_severity)),
            ("has_inclusion_list", has_inclusion),
            ("filter_weight", 0 if self.refused is not None else weight),
        ):
            object.__setattr__(self, name, value)

    @property
    def invalid_inclusion(self) -> tuple[str, ...]:
        return self.inclusion.invalid

    @property
    def invalid_exclusion(self) -> tuple[str, ...]:
        return self.exclusion.invalid

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

    def message_allowed(self, message: str | bytes) -> bool:
        """Inclusion (any must match, if a list is given) then exclusion (any match excludes).

        Pass the message encoded (``encode_message``) when several Alerts look at the same event.
        """
        if self.refused is not None:
            return False
        if not self.has_inclusion_list and self.exclusion.empty:
            return True
        text = encode_message(message) if isinstance(message, str) else message
        if self.has_inclusion_list and not self.inclusion.any_match(text):
            return False
        return not self.exclusion.any_match(text)


def encode_message(message: str) -> bytes:
    """UTF-8, as RE2 sees it (never raises: a lone surrogate becomes bytes RE2 treats as invalid UTF-8)."""
    return message.encode("utf-8", "surrogatepass")


def _compiled_list(expressions: list[str] | None, previous: ExpressionList | None) -> ExpressionList:
    if previous is not None and previous.expressions == tuple(expressions or ()):
        return previous
    return compile_list(expressions)


def filter_error(expression: str) -> str | None:
    """Why ``spec.filter`` does not compile (CEL over ``event`` returning a bool), or None."""
    from .cel import CELError, OutputType, compile_expression  # the CEL engine only when a filter is used

    try:
        compile_expression(expression, variables=("event",), output=OutputType.BOOL)
    except CELError as exc:
        return f"invalid spec.filter CEL expression: {exc}"
    return None


def compile_alert(alert: Alert, previous: CompiledAlert | None = None) -> CompiledAlert:
    """Compile ``alert``; the lists of ``previous`` (the same Alert's former version) are reused if unchanged."""
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
    spec: AlertSpec = alert.spec
    errors = spec.validation_errors()
    if not errors and spec.filter and (why := filter_error(spec.filter)):
        errors = [why]
    if errors:
        return CompiledAlert(alert, sources, _NOTHING, _NOTHING, refused="; ".join(errors))
    reusable = previous is not None and previous.refused is None
    inclusion = _compiled_list(spec.inclusion_list, previous.inclusion if previous and reusable else None)
    exclusion = _compiled_list(spec.exclusion_list, previous.exclusion if previous and reusable else None)
    return CompiledAlert(alert, sources, inclusion, exclusion)

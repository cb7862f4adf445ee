"""Matchers at run time (issue 26): what a Silence's ``spec.matchers`` and an Alert's ``spec.inhibitRules``
mean for one notification.

A notification's *fields* are what a matcher may name: ``kind``, ``name``, ``namespace`` (of the involved
object), ``reason``, ``severity``, ``alert``, ``provider`` (names of the Alert and of its Provider) and
``metadata.KEY`` (the event's metadata; an absent key reads as ``""``, as an absent label does in
Alertmanager, so ``metadata.env!=prod`` matches an event without ``env``). ``=`` and ``!=`` compare
strings; ``=~`` and ``!~`` are RE2 expressions anchored at both ends (``name=~apps-.*`` does not match
``my-apps-1``), as Alertmanager's matchers are.

Every value a matcher reads comes from an unauthenticated event, and every expression from a tenant: RE2
is linear in the text, expressions are bounded in number and length (``api/silence.py``) and the text is
bounded too (``MAX_FIELD``: metadata values and messages are cut, as no name or reason is that long), so
one matcher costs at most ``MAX_MATCHER_VALUE × MAX_FIELD`` steps. Compiled matchers are cached by their
text (``compiled``), so a Silence seen on every event compiles once.

A regular expression's answers for short texts are remembered (``_SEEN``: at most ``SEEN_SIZE`` answers of
texts up to ``SEEN_TEXT`` characters, ~1 MB, dropped together when full): names, kinds and reasons repeat
from event to event, and one search through the ``re2`` module's Python wrapper (encoding the text, a
``Match``) cost ~50k instructions per notification in a Silence that held nothing (callgrind, issue 29: 7 %
of a delivered notification), a remembered answer a dict lookup.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import re2

from ..api.alert import Alert
from ..api.event import Event
from ..api.silence import Matcher, MatchType

MAX_FIELD = 4096
"""Characters of a field a matcher looks at (a longer metadata value is cut: no name or reason is longer)."""

Fields = Mapping[str, str]
Predicate = Callable[[Fields], bool]


def _options() -> Any:
    options = re2.Options()
    options.never_capture = True
    options.log_errors = False  # a tenant must not be able to write stderr lines per event
    return options


_OPTIONS = _options()

SEEN_SIZE = 4096
SEEN_TEXT = 256
_SEEN: dict[tuple[int, str], bool] = {}
_PROGRAMS = itertools.count()  # a token per compiled program: an id() could be reused by a later program


def _searcher(program: Any) -> Callable[[str], bool]:
    """``program`` (anchored) matches ``text``; short texts' answers remembered (the module docstring)."""
    token = next(_PROGRAMS)
    seen = _SEEN

    def search(text: str) -> bool:
        if len(text) > SEEN_TEXT:
            return program.search(text) is not None
        key = (token, text)
        hit = seen.get(key)
        if hit is None:
            if len(seen) >= SEEN_SIZE:
                seen.clear()
            hit = seen[key] = program.search(text) is not None
        return hit

    return search


class EventFields(Mapping[str, str]):
    """The fields of one notification, read lazily from the event (most matchers read one or two)."""

    __slots__ = ("_alert", "_event", "_of", "_provider")

    def __init__(self, event: Event, alert: str = "", provider: str = "", of: Alert | None = None) -> None:
        """``of``: the Alert, whose names are then read only if a matcher asks for them (a model's attributes
        cost a lookup each: four of them were ~1,000 instructions a notification)."""
        self._event = event
        self._alert = alert
        self._provider = provider
        self._of = of

    def __getitem__(self, key: str) -> str:
        event = self._event
        obj = event.involved_object
        if key == "kind":
            value = obj.kind
        elif key == "name":
            value = obj.name
        elif key == "namespace":
            value = obj.namespace
        elif key == "reason":
            value = event.reason
        elif key == "severity":
            value = event.severity
        elif key == "alert":
            value = self._alert if self._of is None else self._of.metadata.name
        elif key == "provider":
            value = self._provider if self._of is None else self._of.spec.provider_ref.name
        elif key.startswith("metadata."):
            value = (event.metadata or {}).get(key[len("metadata.") :], "")
        else:
            raise KeyError(key)
        return str(value)[:MAX_FIELD]

    def get(self, key: str, default: Any = "") -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __iter__(self) -> Any:
        yield from ("kind", "name", "namespace", "reason", "severity", "alert", "provider")
        for key in self._event.metadata or {}:
            yield "metadata." + key

    def __len__(self) -> int:
        return 7 + len(self._event.metadata or {})


@functools.lru_cache(maxsize=4096)
def _compiled_one(name: str, match_type: MatchType, value: str) -> Predicate | None:
    """One matcher as a predicate; None when its expression does not compile (the matcher then matches
    nothing, so a broken Silence holds nothing: its status says why)."""
    if match_type is MatchType.EQUAL:
        return lambda fields: fields.get(name, "") == value
    if match_type is MatchType.NOT_EQUAL:
        return lambda fields: fields.get(name, "") != value
    try:
        program = re2.compile(f"^(?:{value})$", _OPTIONS)
    except re2.error:
        return None
    search = _searcher(program)
    if match_type is MatchType.REGEX:
        return lambda fields: search(fields.get(name, ""))
    return lambda fields: not search(fields.get(name, ""))


def compiled(matchers: Sequence[Matcher]) -> Predicate:
    """All of ``matchers`` as one predicate (an empty list matches everything; a matcher whose
    expression does not compile makes the whole list match nothing)."""
    predicates = [_compiled_one(m.name, m.match_type, m.value) for m in matchers]
    if any(p is None for p in predicates):
        return lambda fields: False
    checks = [p for p in predicates if p is not None]
    if len(checks) == 1:  # the usual Silence: its one matcher, without a generator per notification
        return checks[0]
    return lambda fields: all(check(fields) for check in checks)

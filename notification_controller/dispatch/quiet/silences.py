"""The silence stage (pre-queue, after noise control): a notification whose fields match every matcher of an
active Silence of its Alert's namespace is held (``Suppressed.SILENCED``), counted for the summary
(``held.py``) and sent as part of one summary when the Silence ends (``summary.py``). docs/silences.md.

Which Silences apply: those of the Alert's namespace, and with ``--cluster-silences-namespace=NS`` those of
``NS`` with ``spec.allNamespaces: true``. A Silence that is invalid (its status says why: the reconciler
reports it) or not active at this instant holds nothing.

Cost. A namespace without a Silence costs a dict lookup or two per notification (``SilenceIndex.applying``:
its compiled Silences, kept per namespace until one of them changes). Otherwise each Silence is
compiled once per version (its matchers into one predicate, its window into two numbers; ``Compiled``), kept
until the Silence changes; the namespace's list is kept sorted by end, latest first, so the first match is the
Silence that holds longest (the summary then comes when nothing holds any more) and the search stops there.
Silences are a tenant's to write and events an unauthenticated client's to send, so at most
``MAX_EVALUATED`` active Silences are evaluated per notification (those that end last): beyond that a
notification is not checked against the rest, counted in
``notification_noise_untracked_total{stage="silence",reason="silence_limit"}`` and reported by a Warning on
the Alert at most every five minutes. With RE2 (linear) and fields cut at 4 KB (``core/quiet.py``) one
notification costs at most ``MAX_EVALUATED × 32`` = 1,024 matcher runs: 2,048 runs of 4 KB took 26 ms here,
so ~13 ms at worst. Matchers are compiled when a Silence is first evaluated, not when it is loaded, and kept
for the ``MAX_COMPILED`` Silences used last (tests/adversarial/test_silence_load.py: 1,000 Silences of 32
regular expressions each against hostile events, time and memory measured).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ...api.alert import Alert
from ...api.silence import Silence
from ...core.noise import Suppressed
from ...core.quiet import EventFields, Predicate, compiled
from ...errors import StoreError
from ...objects.base import Change
from ..model import Draft, Drop
from .held import HELD_GRACE, silence_total_key
from .shared import MAX_RECORDS_PER_ALERT, QuietState, alert_id

log = logging.getLogger(__package__)

MAX_EVALUATED = 32
"""Active Silences evaluated per notification at most (those ending last; the module docstring)."""
MAX_MATCHERS_TEXT = 256
"""Characters of a Silence's matchers quoted in a Drop's message, explain's line and the Held condition."""
MAX_COMPILED = 256
"""Silences whose matchers are kept compiled (least recently used first out): 32 RE2 programs each, ~2.5 KB
apiece measured (32,000 programs: 80 MB), so the cache stays under ~20 MB however many Silences exist."""


def _never(fields: object) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Compiled:
    """One Silence with a window, ready for the hot path (its matchers are compiled on first use:
    ``SilenceIndex.predicate``)."""

    silence: Silence
    starts: float
    ends: float
    # the Silence's names, read once here: its metadata is a model whose attributes cost a lookup each
    namespace: str
    name: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def uid(self) -> str:
        return self.silence.metadata.uid or f"{self.namespace}/{self.name}"

    @property
    def label(self) -> str:
        return f"Silence {self.namespace}/{self.name}"

    @property
    def total_key(self) -> str:
        return silence_total_key(self.namespace, self.name, self.uid)

    def active(self, now: float) -> bool:
        return self.starts <= now < self.ends

    def describe(self) -> str:
        """``held by Silence ns/name until <time> (matchers ...)`` (the Drop's message, explain's line)."""
        until = datetime.fromtimestamp(self.ends, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        matchers = ", ".join(str(m) for m in self.silence.spec.matchers)
        if len(matchers) > MAX_MATCHERS_TEXT:  # 32 matchers of 1,024 characters: not in every log line
            matchers = matchers[: MAX_MATCHERS_TEXT - 1] + "…"
        return f"held by {self.label} until {until} (matchers {matchers})"


def compile_silence(silence: Silence) -> Compiled | None:
    """The Silence with its window, or None when it has none (it then holds nothing)."""
    window = silence.window()
    if window is None:
        return None
    starts, ends = window
    meta = silence.metadata
    return Compiled(silence, starts.timestamp(), ends.timestamp(), meta.namespace, meta.name)


def predicate_of(silence: Silence) -> Predicate:
    """The Silence's matchers as one predicate; an invalid Silence matches nothing (its status says why)."""
    if silence.spec.validation_errors():
        return _never
    return compiled(silence.spec.matchers)


class SilenceIndex:
    """The compiled Silences per namespace, latest end first, kept current by the object cache's changes."""

    def __init__(self, core: QuietState) -> None:
        self.core = core
        self._compiled: dict[tuple[str, str], tuple[Silence, Compiled | None]] = {}
        self._by_ns: dict[str, tuple[Compiled, ...]] = {}
        self._cluster: tuple[Compiled, ...] | None = None
        self._predicates: OrderedDict[tuple[str, str], tuple[Silence, Predicate]] = OrderedDict()
        core.objects.subscribe(self._changed)

    def predicate(self, c: Compiled) -> Predicate:
        """``c``'s matchers, compiled on first use and kept for the ``MAX_COMPILED`` last used Silences."""
        key = c.key
        cached = self._predicates.get(key)
        if cached is not None and cached[0] is c.silence:
            self._predicates.move_to_end(key)
            return cached[1]
        predicate = predicate_of(c.silence)
        self._predicates[key] = (c.silence, predicate)
        if len(self._predicates) > MAX_COMPILED:
            self._predicates.popitem(last=False)
        return predicate

    def _changed(self, change: Change) -> None:
        if change.kind != "Silence":
            return
        self._compiled.pop((change.namespace, change.name), None)
        self._predicates.pop((change.namespace, change.name), None)
        self._by_ns.pop(change.namespace, None)
        if change.namespace == self.core.cluster_namespace:
            self._cluster = None

    def _compile(self, silences: Sequence[Silence]) -> tuple[Compiled, ...]:
        out: list[Compiled] = []
        for silence in silences:
            key = (silence.metadata.namespace, silence.metadata.name)
            cached = self._compiled.get(key)
            if cached is None or cached[0] is not silence:
                cached = (silence, compile_silence(silence))
                self._compiled[key] = cached
            if cached[1] is not None:
                out.append(cached[1])
        out.sort(key=lambda c: (-c.ends, c.namespace, c.name))
        return tuple(out)

    def of_namespace(self, namespace: str) -> tuple[Compiled, ...]:
        found = self._by_ns.get(namespace)
        if found is None:
            found = self._by_ns[namespace] = self._compile(self.core.objects.silences_in(namespace))
        return found

    def cluster_wide(self) -> tuple[Compiled, ...]:
        if self._cluster is None:
            in_ns = self.core.objects.silences_in(self.core.cluster_namespace)
            self._cluster = self._compile([s for s in in_ns if s.spec.all_namespaces])
        return self._cluster

    def applying(self, namespace: str) -> tuple[tuple[Compiled, ...], tuple[Compiled, ...]]:
        """The Silences that may hold the notifications of an Alert in ``namespace``: its own, cluster-wide."""
        own = self.of_namespace(namespace)
        cluster = self.core.cluster_namespace
        return own, (self.cluster_wide() if cluster and cluster != namespace else ())

    def match(
        self,
        draft: Draft,
        now: float,
        applying: tuple[tuple[Compiled, ...], tuple[Compiled, ...]] | None = None,
    ) -> tuple[Compiled | None, bool]:
        """The active Silence ending last whose matchers all match, and whether the bound cut the search
        (``applying``: the Silences of the draft's Alert, when the caller has them already)."""
        alert = draft.alert
        own, cluster = applying or self.applying(alert.metadata.namespace)
        if not own and not cluster:
            return None, False
        fields = EventFields(draft.event, "", "", alert)
        budget = MAX_EVALUATED
        best: Compiled | None = None
        for candidates in (own, cluster):
            for c in candidates:
                if best is not None and c.ends <= best.ends:
                    break  # sorted by end: nothing later can hold longer
                if not c.starts <= now < c.ends:  # ``c.active(now)``, without the call
                    continue
                if budget == 0:
                    return best, True
                budget -= 1
                if self.predicate(c)(fields):
                    best = c
                    break
        return best, False


class Silences:
    """The pre-queue stage (the module docstring)."""

    name = "quiet-silence"

    def __init__(self, core: QuietState) -> None:
        self.core = core
        self.index = SilenceIndex(core)

    def __call__(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        applying = self.index.applying(draft.alert.metadata.namespace)  # kept per namespace: dict lookups
        if not applying[0] and not applying[1]:
            return draft  # the common case
        silence, cut = self.index.match(draft, self.core.now(), applying)
        if cut:
            self._limited(draft.alert)
        if silence is None:
            return draft
        return self._hold(draft, silence)

    def _limited(self, alert: Alert) -> None:
        self.core.limited(
            alert,
            "silence",
            "silence_limit",
            f"more than {MAX_EVALUATED} active Silences apply to this Alert: notifications are checked against "
            f"the {MAX_EVALUATED} that end last only",
        )

    async def _hold(self, draft: Draft, silence: Compiled) -> Draft | Drop:
        now = self.core.now()
        alert = draft.alert
        recorded = self.core.room(alert, silence.uid, silence.ends + HELD_GRACE)
        try:
            if recorded:
                await self.core.held.record(
                    alert_id(alert),
                    silence.uid,
                    silence.label,
                    silence.ends,
                    draft.event,
                    now,
                    total_key=silence.total_key,
                )
            else:
                await self.core.held.count(silence.total_key, max(silence.ends - now, 0.0) + HELD_GRACE)
        except StoreError as exc:
            self.core.store_failed("silence", exc)
            return draft
        why = f"{draft.event.involved_object.describe()}: {silence.describe()}"
        if not recorded:
            self.core.limited(
                alert,
                "silence",
                "record_limit",
                f"more than {MAX_RECORDS_PER_ALERT} Silences hold notifications of this Alert: what the others "
                "hold is counted but not summarised",
            )
            why += " (not summarised: too many Silences hold this Alert)"
        self.core.held_for(alert)
        return Drop(Suppressed.SILENCED, why, suppressed=True)

"""One stage type and one runner: the sync-or-awaitable logic of the whole pipeline, in one place.

A stage takes a value (a ``Draft`` before the queue, a ``Delivery`` at send time) and returns the value
(possibly replaced), a ``Drop``, or an awaitable of either when it needs I/O. Flux's rules, noise control,
hooks, templates and threads are all stages; the composition root (``builder.py``) puts them in three
lists (pre-queue, pre-send, post-send) before anything is built, as Alertmanager's ``PipelineBuilder``
does. ``Stage`` names a plain function; a class with ``name`` and ``__call__`` is a stage too.

``Runner.run`` is the pre-queue loop: synchronous while every stage answers synchronously (so the memory
store's 202 needs no task), an awaitable from the first stage that needs I/O. ``Runner.finish`` goes on
from there (and runs the pre-send list, whose stages mostly await). A stage that raises drops the value;
what that means (a Warning, a metric) is the ``failed`` callback's, given by the owner of the list.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, final

from .model import Drop

log = logging.getLogger(__name__)

T = TypeVar("T")


class StageLike(Protocol[T]):
    """Anything with a ``name`` (logs, CONTRIBUTING's list) that maps a value to the value to pass on, a
    ``Drop``, or an awaitable of either."""

    @property
    def name(self) -> str: ...

    def __call__(self, value: T, /) -> T | Drop | Awaitable[T | Drop]: ...


@final  # the runner calls ``run`` itself (``Runner.calls``): a subclass's ``__call__`` would be skipped
@dataclass(frozen=True, slots=True)
class Stage(Generic[T]):
    """A named function as a stage."""

    name: str
    run: Callable[[T], T | Drop | Awaitable[T | Drop]]

    def __call__(self, value: T, /) -> T | Drop | Awaitable[T | Drop]:
        return self.run(value)


Dropped = Callable[[Any, Drop], None]
Failed = Callable[[Any, StageLike[Any], Exception], None]


class Runner(Generic[T]):
    """Runs one stage list over values of type ``kind``; see the module docstring."""

    __slots__ = ("calls", "dropped", "failed", "kind", "stages")

    def __init__(
        self, stages: Sequence[StageLike[T]], kind: type[T], dropped: Dropped, failed: Failed
    ) -> None:
        self.stages = tuple(stages)
        # what each stage runs: a ``Stage``'s function itself, not its ``__call__`` (one Python frame less
        # per stage and notification: ~12 in the pre-queue list of a Flux Alert)
        self.calls: tuple[Callable[[T], T | Drop | Awaitable[T | Drop]], ...] = tuple(
            s.run if isinstance(s, Stage) else s for s in self.stages
        )
        self.kind = kind
        self.dropped = dropped
        self.failed = failed

    def __len__(self) -> int:
        return len(self.stages)

    def run(self, value: T) -> T | Awaitable[T | None] | None:
        """The value after every stage, None (dropped and reported), or an awaitable of either once a
        stage needed I/O."""
        kind = self.kind
        for i, call in enumerate(self.calls):
            try:
                result = call(value)
            except Exception as exc:
                self.failed(value, self.stages[i], exc)
                return None
            if isinstance(result, kind):  # the common case first: ``isawaitable`` costs more
                value = result
            elif isinstance(result, Drop):
                self.dropped(value, result)
                return None
            else:
                return self.finish(value, result, i + 1)  # type: ignore[arg-type]
        return value

    async def finish(self, value: T, pending: Awaitable[T | Drop] | None = None, start: int = 0) -> T | None:
        """Await ``pending`` (the answer of stage ``start - 1``), then run the stages from ``start``,
        awaiting whichever needs it. ``finish(value)`` runs the whole list."""
        kind, stages = self.kind, self.stages
        i = start
        while True:
            if pending is not None:
                try:
                    result = await pending
                except Exception as exc:
                    self.failed(value, stages[i - 1], exc)
                    return None
                if isinstance(result, Drop):
                    self.dropped(value, result)
                    return None
                value = result
                pending = None
            if i == len(stages):
                return value
            call = self.calls[i]
            i += 1
            try:
                answer = call(value)
            except Exception as exc:
                self.failed(value, stages[i - 1], exc)
                return None
            if isinstance(answer, kind):
                value = answer
            elif isinstance(answer, Drop):
                self.dropped(value, answer)
                return None
            else:
                pending = answer  # type: ignore[assignment]


def name_of(stage: object) -> str:
    """A stage's name for logs."""
    return str(getattr(stage, "name", type(stage).__name__))

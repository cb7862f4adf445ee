"""Run the hooks of one phase in series, each receiving the previous one's output (the plugin model's
"chainable" hooks, seed 003: "Hooks are called in serial, and block the request until all have returned").

The phase-specific parts are two functions: ``request(state)`` builds the JSON sent to a hook from the
current state, ``apply(hook, target, state, answer)`` turns a 2xx answer into the next state (``Applied``)
or ends the chain on purpose (``Stopped``: a drop, a non-True condition). A hook error with ``continue``
(the hook's choice) or from a hook with ``failurePolicy: Ignore`` (the declarer's choice) leaves the state
as it was and goes on; any other error ends the chain with ``failure`` set. Every call is counted in
``notification_hook_calls_total{phase,hook,outcome}`` and timed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..logsetup import fields
from .client import HookCallError, HookClient, HookTarget, TargetResolver
from .metrics import HookMetrics, Outcome
from .registry import BoundHook

log = logging.getLogger(__name__)

S = TypeVar("S")


@dataclass(frozen=True)
class Applied(Generic[S]):
    """The hook answered; ``state`` is what the next hook receives."""

    state: S
    changed: bool


@dataclass(frozen=True)
class Stopped(Generic[S]):
    """The hook's answer ends the chain on purpose (``outcome`` labels the call)."""

    state: S
    outcome: Outcome
    message: str


@dataclass
class ChainResult(Generic[S]):
    state: S
    stopped: Stopped[S] | None = None
    failure: HookCallError | None = None
    hook: BoundHook | None = None  # the hook that stopped the chain or failed
    continued: list[tuple[BoundHook, HookCallError]] = field(default_factory=list)


@dataclass(frozen=True)
class Chain:
    """What every phase shares: where hooks are resolved, how they are called, where calls are counted."""

    resolver: TargetResolver
    client: HookClient
    metrics: HookMetrics

    async def run(
        self,
        phase: str,
        hooks: Sequence[BoundHook],
        state: S,
        *,
        request: Callable[[S], Mapping[str, Any]],
        apply: Callable[[BoundHook, HookTarget, S, Any], Applied[S] | Stopped[S]],
        retry: bool,
    ) -> ChainResult[S]:
        result: ChainResult[S] = ChainResult(state)
        for bound in hooks:
            started = time.monotonic()
            try:
                target = await self.resolver.resolve(bound)
                answer = await self.client.call(target, request(result.state), retry=retry)
                step = apply(bound, target, result.state, answer)
            except HookCallError as error:
                ignored = not error.proceed and bound.hook.ignores_failures()
                outcome = (
                    Outcome.CONTINUED
                    if error.proceed
                    else Outcome.IGNORED
                    if ignored
                    else Outcome.TIMEOUT
                    if error.timeout
                    else Outcome.ERROR
                )
                self.metrics.observe(phase, bound.name, outcome, time.monotonic() - started)
                if error.proceed or ignored:
                    # continue: true is the hook's own answer (info); an ignored failure is an outage the
                    # declarer chose to ride through: worth an operator's eye, one line per call.
                    log.log(
                        logging.INFO if error.proceed else logging.WARNING,
                        "%s hook %s failed, continuing (%s): %s",
                        phase,
                        bound.name,
                        "as asked" if error.proceed else "failurePolicy: Ignore",
                        error,
                        extra=fields(hook=bound.name, phase=phase, outcome=outcome.value),
                    )
                    result.continued.append((bound, error))
                    continue
                result.failure, result.hook = error, bound
                return result
            if isinstance(step, Stopped):
                self.metrics.observe(phase, bound.name, step.outcome, time.monotonic() - started)
                result.state, result.stopped, result.hook = step.state, step, bound
                return result
            outcome = Outcome.CHANGED if step.changed else Outcome.OK
            self.metrics.observe(phase, bound.name, outcome, time.monotonic() - started)
            result.state = step.state
        return result


def invalid(bound: BoundHook, what: str) -> HookCallError:
    """An answer that breaks the Hooks API: a permanent error without continue."""
    return HookCallError(f"hook '{bound.name}' sent an invalid answer: {what}", permanent=True)

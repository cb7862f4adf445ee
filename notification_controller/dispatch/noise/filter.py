"""``spec.filter`` (CEL, variable ``event``): the first noise-control stage, and its send-time half for
durable stores (issue 23: the event POST never waits on a tenant's expression)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from ...core.noise import Suppressed
from ...sandbox import SandboxFailure, SandboxPool
from ..heartbeat import is_heartbeat
from ..model import Delivery, Draft, Drop
from .state import NoiseState, suppress


class Filter:
    name = "noise-filter"

    def __init__(self, core: NoiseState, sandbox: SandboxPool | None) -> None:
        self.core = core
        self.sandbox = sandbox  # spec.filter beyond the inline-safe subset runs there

    def __call__(self, draft: Draft) -> Draft | Drop | Awaitable[Draft | Drop]:
        """``spec.filter`` (CEL, variable ``event``). An inline-safe expression (no comprehension, no
        growing call: ``Expression.inline_safe``) is evaluated here, on the loop (tens of µs). Any other
        one runs in the sandbox's worker processes (bounded in time and memory): with the memory store as
        an awaitable here (the event POST was answered already); with a durable store it is *deferred*
        to send time (``at_send``), so that the POST, which waits for the pre-queue stages before
        it answers, never waits on a tenant's expression (issue 23)."""
        expression = draft.alert.spec.filter
        if not expression:
            return draft
        from ...core.cel import CELError, OutputType, compile_expression  # the CEL engine only when used

        try:
            program = compile_expression(expression, variables=("event",), output=OutputType.BOOL)
            if program.inline_safe or self.sandbox is None:
                keep = program.evaluate_bool({"event": draft.event.as_cel()})
            elif self.core.state.durable:
                return draft  # evaluated by ``at_send`` once the notification is stored
            else:
                return self._filter_in_sandbox(draft, program)
        except CELError as exc:
            return self._filter_failed(draft, exc)
        return draft if keep else suppress(Suppressed.FILTER, draft, "spec.filter returned false")

    async def _filter_in_sandbox(self, draft: Draft, program: Any) -> Draft | Drop:
        from ...core.cel import CELError

        assert self.sandbox is not None
        try:
            keep = await self.sandbox.cel(
                program,
                {"event": draft.event.as_cel()},
                namespace=draft.alert.metadata.namespace,
                kind="filter",
            )
        except (CELError, SandboxFailure) as exc:
            return self._filter_failed(draft, exc)
        if not isinstance(keep, bool):
            return self._filter_failed(draft, TypeError("not a bool"))
        return draft if keep else suppress(Suppressed.FILTER, draft, "spec.filter returned false")

    def _filter_failed(self, draft: Draft, exc: Exception) -> Draft:
        # fail open: a typo (or an expression over the sandbox's bounds) must not swallow an outage's
        # notifications; the Alert says so
        self.core.warn(
            draft.alert,
            "FilterFailed",
            f"spec.filter could not be evaluated for {draft.event.involved_object.describe()}, "
            f"notifying anyway: {exc}",
        )
        return draft

    async def at_send(self, delivery: Delivery) -> Delivery | Drop:
        """Pre-send (durable stores only): the ``spec.filter`` that ``filter`` deferred, evaluated in the
        sandbox against the current Alert. It runs after threshold, notifyOn, repeatInterval and groupBy
        (docs/noise-control.md says so); fail open as ``filter``."""
        expression = delivery.alert.spec.filter
        if not expression or self.sandbox is None or not self.core.state.durable:
            return delivery
        if is_heartbeat(delivery.notification):  # an Alert's heartbeat skips its filter (heartbeat.py)
            return delivery
        from ...core.cel import CELError, OutputType, compile_expression

        draft = Draft(delivery.event, delivery.alert, delivery.provider)
        try:
            program = compile_expression(expression, variables=("event",), output=OutputType.BOOL)
        except CELError as exc:
            self._filter_failed(draft, exc)
            return delivery
        if program.inline_safe:
            return delivery  # decided before the notification was stored
        decided = await self._filter_in_sandbox(draft, program)
        return decided if isinstance(decided, Drop) else delivery

"""The last delivery success and failure of each Provider, for the UI's overview (issue 27).

"Is Slack down, or is it my Alert?" is answered by the time of a Provider's last accepted delivery and of its
last failed attempt with its (masked) error. The ``Reporter`` (report.py) already sees every delivery and
every failed attempt, on every store (memory lanes and the durable outbox), so it feeds this tracker: two
float stores and a string reference per attempt, no allocation on the hot path once a Provider is known.
The history (``history/``) holds the same facts, but finding the newest success of each Provider there is a
query per Provider per page view; this answers from a dict.

Bounded by the Providers that exist: a key is a Provider a notification was resolved to (the ObjectStore
held it), and a deleted Provider is forgotten with its metric series (``Reporter.forget_provider``). A hard
cap (``MAX_PROVIDERS``, oldest entry out) backs that up. Errors are kept as the Reporter masked them, cut
to ``MAX_ERROR`` characters.

This is the one replica's view: with two replicas on a shared store each knows the deliveries it made
(docs/ui.md says so); the circuit breaker is per replica too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_PROVIDERS = 10_000
MAX_ERROR = 1024


@dataclass(slots=True)
class ProviderState:
    last_success: float | None = None
    """Epoch seconds of the last delivery the provider accepted."""
    last_failure: float | None = None
    """Epoch seconds of the last failed attempt (retried or not)."""
    last_error: str = ""
    """That failure's error, masked by the Reporter, at most ``MAX_ERROR`` characters."""


class ProviderHealth:
    """``provider`` keys are ``namespace/name`` (``Notification.provider.key``)."""

    def __init__(self, now: Callable[[], float] = time.time, max_providers: int = MAX_PROVIDERS) -> None:
        self._now = now
        self._max = max_providers
        self._states: dict[str, ProviderState] = {}

    def _state(self, provider: str) -> ProviderState:
        state = self._states.get(provider)
        if state is None:
            if len(self._states) >= self._max:
                del self._states[next(iter(self._states))]  # the oldest entry: insertion order
            state = self._states[provider] = ProviderState()
        return state

    def success(self, provider: str) -> None:
        self._state(provider).last_success = self._now()

    def failure(self, provider: str, error: str) -> None:
        state = self._state(provider)
        state.last_failure = self._now()
        state.last_error = error[:MAX_ERROR]

    def forget(self, provider: str) -> None:
        self._states.pop(provider, None)

    def get(self, provider: str) -> ProviderState | None:
        """A copy (the caller may keep it), or None when nothing was attempted since the start."""
        state = self._states.get(provider)
        return (
            None if state is None else ProviderState(state.last_success, state.last_failure, state.last_error)
        )

    def __len__(self) -> int:
        return len(self._states)

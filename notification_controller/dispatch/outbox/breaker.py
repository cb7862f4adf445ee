"""A circuit breaker per outbox lane: after ``threshold`` consecutive failures the lane stops leasing for
a cool-down, then lets a single probe through; the probe's success closes it (``runner.py`` drives it;
``queue.py`` turns its changes into Events on the Provider)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ...lib.clock import Clock


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass
class CircuitBreaker:
    """Per lane: ``threshold`` consecutive failures open it for ``cooldown`` seconds (doubling on each
    failed probe up to ``max_cooldown``); then one probe is let through; its success closes it."""

    clock: Clock
    threshold: int = 5
    cooldown: float = 30.0
    max_cooldown: float = 300.0
    failures: int = 0
    state: BreakerState = BreakerState.CLOSED
    _open_until: float = 0.0
    _current: float = 0.0
    _probing: bool = False

    def allow(self) -> bool:
        """May a worker lease now? In half-open state only one (the probe) may."""
        if self.state is BreakerState.OPEN:
            if self.clock.monotonic() < self._open_until:
                return False
            self.state = BreakerState.HALF_OPEN
        if self.state is BreakerState.HALF_OPEN:
            if self._probing:
                return False
            self._probing = True
        return True

    def release(self) -> None:
        """The worker that was allowed leased nothing (empty lane): the probe slot is free again."""
        self._probing = False

    def success(self) -> None:
        self.failures = 0
        self._probing = False
        self._current = 0.0
        self.state = BreakerState.CLOSED

    def failure(self) -> bool:
        """Record a failed attempt; True when this failure opened the breaker."""
        self.failures += 1
        probing, self._probing = self._probing, False
        if self.state is BreakerState.HALF_OPEN or (probing and self.state is not BreakerState.CLOSED):
            self._current = min(self.max_cooldown, max(self.cooldown, self._current * 2))
        elif self.failures >= self.threshold and self.state is BreakerState.CLOSED:
            self._current = self.cooldown
        else:
            return False
        self.state = BreakerState.OPEN
        self._open_until = self.clock.monotonic() + self._current
        return True

    @property
    def reopens_in(self) -> float:
        return max(0.0, self._open_until - self.clock.monotonic()) if self.state is BreakerState.OPEN else 0.0

"""When the outbox redelivers, and how its runner is tuned (``runner.py``)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ...lib.backoff import backoff
from ...settings import EventSettings, StoreSettings


@dataclass(frozen=True)
class RedeliveryPolicy:
    """When the outbox redelivers a notification whose delivery failed (not ``outbound.RetryPolicy``, which
    retries one request inside one delivery)."""

    base: float = StoreSettings.retry_base
    cap: float = StoreSettings.retry_cap
    retry_after_cap: float = 3600.0
    """A provider's ``Retry-After`` is honoured up to this many seconds."""

    def delay(
        self, attempts: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds before the next attempt after ``attempts`` failed ones: equal jitter over an
        exponential delay, never shorter than what the provider asked for (bounded)."""
        ceiling = backoff(attempts - 1, self.base, self.cap)
        delay = ceiling / 2 + (rng or random).uniform(0.0, ceiling / 2)
        if retry_after is not None and retry_after > 0:
            delay = max(delay, min(retry_after, self.retry_after_cap))
        return delay


@dataclass(frozen=True)
class DurableSettings:
    """Defaults and help live in ``settings.py``."""

    max_age: float = StoreSettings.delivery_max_age
    """``--delivery-max-age``: an item older than this is dead-lettered instead of retried."""
    concurrency: int = EventSettings.provider_concurrency
    poll_interval: float = 1.0
    retry: RedeliveryPolicy = field(default_factory=RedeliveryPolicy)
    breaker_threshold: int = StoreSettings.breaker_threshold
    breaker_cooldown: float = StoreSettings.breaker_cooldown

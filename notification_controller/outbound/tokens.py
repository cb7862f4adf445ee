"""A cache of short-lived credentials minted at delivery time (GitHub App installation tokens, Google
OAuth2 access tokens), owned by the dispatcher and handed to notifiers through ``DeliveryContext.tokens``.

Flux keeps such tokens in ``fluxcd/pkg/cache.TokenCache`` so that a burst of events does not mint one
token per event (GitHub limits the rate of installation-token requests). This is the same idea:

* keys are SHA-256 digests of everything that identifies the credential (app id, installation, base URL,
  private key...), so no secret material sits in the key space and a rotated key never reuses an old token;
* a token is reused until 80 % of its lifetime has passed (and never within ``min_margin`` seconds of its
  expiry), so an in-flight request never carries a token that expires under it;
* concurrent misses on one key mint once (a per-key lock), and the cache is bounded (least recently used
  entries are dropped beyond ``capacity``).

It holds no delivery state beyond tokens and lives in an object, never in a module global, so two
controllers in one process (tests) never share credentials.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT_CAPACITY = 1024
LIFETIME_FRACTION = 0.8
MIN_MARGIN = 60.0
MAX_TTL = 3600.0


@dataclass(frozen=True)
class CachedToken:
    """A minted credential. ``expires_at`` is a Unix time in seconds; ``extra`` carries related facts
    (e.g. the GitHub App slug) that were learned while minting."""

    value: str
    expires_at: float
    extra: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"CachedToken(value='***', expires_at={self.expires_at!r})"


def cache_key(*parts: str | bytes) -> str:
    """A stable digest of the parts that identify a credential (order matters)."""
    digest = hashlib.sha256()
    for part in parts:
        raw = part if isinstance(part, bytes) else part.encode("utf-8", errors="surrogateescape")
        digest.update(len(raw).to_bytes(8, "big"))
        digest.update(raw)
    return digest.hexdigest()


class TokenCache:
    """Reuse minted tokens until shortly before they expire. Safe for concurrent use on one event loop."""

    def __init__(
        self,
        *,
        capacity: int = DEFAULT_CAPACITY,
        clock: Callable[[], float] = time.time,
        min_margin: float = MIN_MARGIN,
        max_ttl: float = MAX_TTL,
    ) -> None:
        if capacity < 1:
            raise ValueError(
                "capacity must be at least 1 (no cache at all: pass None where a cache is taken)"
            )
        self._capacity = capacity
        self._max_ttl = max_ttl
        self._clock = clock
        self._min_margin = min_margin
        # key -> (token, reuse-until time)
        self._entries: OrderedDict[str, tuple[CachedToken, float]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _reuse_until(self, token: CachedToken, minted_at: float) -> float:
        lifetime = max(0.0, token.expires_at - minted_at)
        until = minted_at + min(lifetime * LIFETIME_FRACTION, self._max_ttl)
        return min(until, token.expires_at - self._min_margin)

    def get(self, key: str) -> CachedToken | None:
        """The cached token for ``key`` if it may still be used, else None (and the entry is dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        token, until = entry
        if self._clock() >= until:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return token

    def put(self, key: str, token: CachedToken, *, minted_at: float | None = None) -> None:
        until = self._reuse_until(token, self._clock() if minted_at is None else minted_at)
        if until <= self._clock():
            return  # already too close to expiry to be worth keeping
        self._entries[key] = (token, until)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def invalidate(self, key: str) -> None:
        self._entries.pop(key, None)

    def values(self) -> Iterable[str]:
        """Every cached token value (to mask them in error texts)."""
        return [token.value for token, _ in self._entries.values()]

    async def get_or_mint(self, key: str, mint: Callable[[], Awaitable[CachedToken]]) -> CachedToken:
        """Return the cached token for ``key`` or mint, cache and return a new one (once per key at a time)."""
        cached = self.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                cached = self.get(key)
                if cached is not None:
                    self.hits += 1
                    return cached
                self.misses += 1
                minted_at = self._clock()
                token = await mint()
                self.put(key, token, minted_at=minted_at)
                return token
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                # No waiter holds it: drop the lock so the lock map stays bounded too.
                self._locks.pop(key, None)


async def mint_or_cached(
    cache: TokenCache | None, key: str, mint: Callable[[], Awaitable[CachedToken]]
) -> CachedToken:
    """``cache.get_or_mint`` when a cache is available, else mint every time (no caching)."""
    if cache is None:
        return await mint()
    return await cache.get_or_mint(key, mint)

"""The token cache the forges and cloud providers share (``outbound/tokens.py``).

GitHub App installation tokens, Google and Azure access tokens are minted once and reused until 80 % of
their lifetime (or ``--token-cache-max-duration``); a fake clock drives time.
"""

from __future__ import annotations

import asyncio

from notification_controller.outbound.tokens import CachedToken, TokenCache, cache_key

# The async tests come first: pytest-asyncio 1.5 leaks a loop when a sync test precedes an async one in a
# module, pytest-asyncio#724.


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_token_cache_reuses_until_80_percent_of_lifetime() -> None:
    clock = FakeClock()
    cache = TokenCache(clock=clock)
    minted: list[str] = []

    async def mint() -> CachedToken:
        minted.append(f"t{len(minted)}")
        return CachedToken(minted[-1], clock.now + 3600)

    assert (await cache.get_or_mint("k", mint)).value == "t0"
    clock.now += 0.79 * 3600
    assert (await cache.get_or_mint("k", mint)).value == "t0"
    clock.now += 0.02 * 3600
    assert (await cache.get_or_mint("k", mint)).value == "t1"
    assert (cache.hits, cache.misses) == (1, 2)


async def test_token_cache_max_duration_caps_reuse() -> None:
    """--token-cache-max-duration: a 2 h token is reused for at most the configured 10 minutes."""
    clock = FakeClock()
    cache = TokenCache(clock=clock, max_ttl=600)
    minted: list[str] = []

    async def mint() -> CachedToken:
        minted.append(f"t{len(minted)}")
        return CachedToken(minted[-1], clock.now + 7200)

    assert (await cache.get_or_mint("k", mint)).value == "t0"
    clock.now += 599
    assert (await cache.get_or_mint("k", mint)).value == "t0"
    clock.now += 2
    assert (await cache.get_or_mint("k", mint)).value == "t1"


async def test_token_cache_mints_once_for_concurrent_misses() -> None:
    cache = TokenCache()
    calls = 0
    gate = asyncio.Event()

    async def mint() -> CachedToken:
        nonlocal calls
        calls += 1
        await gate.wait()
        return CachedToken("tok", 4_102_444_800.0)

    tasks = [asyncio.create_task(cache.get_or_mint("k", mint)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert calls == 1
    assert {t.value for t in results} == {"tok"}


async def test_token_cache_is_bounded_and_skips_nearly_expired_tokens() -> None:
    clock = FakeClock()
    cache = TokenCache(capacity=2, clock=clock)
    for key in ("a", "b", "c"):
        cache.put(key, CachedToken(key, clock.now + 3600))
    assert len(cache) == 2
    assert cache.get("a") is None
    cache.put("short", CachedToken("s", clock.now + 30))  # within the 60 s margin: not kept
    assert cache.get("short") is None
    assert "s-secret" not in repr(CachedToken("s-secret", 0.0))


def test_cache_key_is_a_digest_of_its_parts() -> None:
    assert cache_key("a", "bc") != cache_key("ab", "c")
    assert len(cache_key("x", b"y")) == 64

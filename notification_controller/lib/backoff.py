"""The one backoff formula of the codebase (issue 24 item 3).

retryablehttp's ``DefaultBackoff``, which Flux's provider client uses: ``wait_min · 2ⁿ`` capped at
``wait_max``, ``n`` counting attempts from 0. The outbound retry loop (``outbound/client.py``) and the
hooks' pre-dispatch retries (``hooks/client.py``) both wait this long; a caller that wants jitter (the
durable outbox's redelivery) spreads the value this returns instead of writing its own doubling.
"""

from __future__ import annotations


def backoff(attempt: int, wait_min: float, wait_max: float) -> float:
    """``wait_min * 2**attempt`` capped at ``wait_max`` (``attempt`` from 0; a huge one does not overflow)."""
    if attempt >= 64:  # 2**64 · any sane minimum is past every cap: no big-integer arithmetic
        return float(wait_max)
    return float(min(wait_max, wait_min * (1 << max(0, attempt))))

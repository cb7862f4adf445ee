"""The one ``Retry-After`` parser of the codebase (issue 24 item 3: ``kube/client.py`` and
``outbound/retry.py`` each had one, and they disagreed on ``1.5``, ``-3`` and a date without a zone).

RFC 9110 §10.2.3: delay-seconds or an HTTP-date. What is accepted, and why:

* a non-negative number of seconds, integer or decimal (``7``, `` 1.5 ``): the kube-apiserver writes
  integers, and a decimal some proxies write is honoured rather than thrown away;
* a negative number is ``0.0`` (retry now: the server asked for no wait), NaN and infinities are None;
* an HTTP date (IMF-fixdate and the obsolete forms ``email.utils`` reads), as seconds from ``now``
  (clipped at 0); a date without a zone is read as UTC, as RFC 9110 says every HTTP-date is (GMT);
* anything else, or nothing, is None: the caller falls back to its own backoff.
"""

from __future__ import annotations

import math
import time
from datetime import UTC
from email.utils import parsedate_to_datetime


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds to wait; None when absent or unreadable. ``now``: Unix seconds (tests)."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if "_" in text:  # float() reads 1_0 as 10: not an HTTP number
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            return None
        return max(0.0, seconds)
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))

"""Duplicate-event detection (reference §3.3): the key formula and a fixed-window limiter.

The limiter reproduces ``sethvargo/go-limiter``'s memory store with one token per window: windows are
aligned to the moment a key was first seen, idle keys are swept after 2× the interval so memory stays
bounded whatever the number of distinct events (checklist C5). State lives in the instance, never in a
global, so tests and multiple servers each own theirs.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType

from ..api.event import MD_ORIGIN_REVISION, MD_REVISION, MD_TOKEN, Event
from ..lib.clock import Clock, SystemClock


def event_key(event: Event, metadata: Mapping[str, str] | None = None) -> str:
    """SHA-256 hex of ``event/name=../namespace=../kind=../message=..[/originRevision=..][/revision=..][/token=..]``.

    ``metadata`` is the cleaned metadata (prefixed keys); defaults to ``event.metadata``.
    """
    md = event.metadata if metadata is None else metadata
    obj = event.involved_object
    text = f"event/name={obj.name}/namespace={obj.namespace}/kind={obj.kind}/message={event.message}"
    api_version = obj.api_version
    keys = _KEYS_OF.get(api_version)
    if keys is None:  # the metadata keys of the object's API group, made once per apiVersion
        group = api_version.split("/", 1)[0] if "/" in api_version else ""  # ``ObjectReference.group``
        if len(_KEYS_OF) >= 64:
            _KEYS_OF.clear()  # a client's apiVersion strings must not accumulate
        keys = _KEYS_OF[api_version] = tuple((key, f"{group}/{key}") for key in _KEYED)
    for key, prefixed in keys:
        value = md.get(prefixed)
        if value is not None:
            text += f"/{key}={value}"
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


_KEYED = (MD_ORIGIN_REVISION, MD_REVISION, MD_TOKEN)
_KEYS_OF: dict[str, tuple[tuple[str, str], ...]] = {}  # apiVersion -> ((key, "<group>/key"), ...)


class Decision:
    """One answer of the limiter; ``reset_at`` is when the key's window ends (Unix seconds, wall clock)."""

    __slots__ = ("allowed", "limit", "remaining", "reset_at")

    def __init__(self, allowed: bool, limit: int, remaining: int, reset_at: float) -> None:
        self.allowed = allowed
        self.limit = limit
        self.remaining = remaining
        self.reset_at = reset_at

    @property
    def reset(self) -> datetime:
        return datetime.fromtimestamp(self.reset_at, UTC)

    def headers(self) -> Mapping[str, str]:
        """``X-RateLimit-*`` (and ``Retry-After`` when refused). Read-only: an admitted event's are shared by
        every event admitted in the same second (issue 29: one dict, not one per 202)."""
        reset = http_date(self.reset_at)
        if self.allowed:
            key = (self.limit, self.remaining, reset)
            shared = _admitted.get(key)
            if shared is None:
                if len(_admitted) >= 8:
                    _admitted.clear()
                shared = _admitted[key] = MappingProxyType(
                    {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining),
                     "X-RateLimit-Reset": reset}
                )  # fmt: skip
            return shared
        out = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": reset,
        }
        if not self.allowed:
            out["Retry-After"] = reset
        return out


_admitted: dict[tuple[int, int, str], Mapping[str, str]] = {}  # ``Decision.headers`` of the last few seconds

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def rfc1123_utc(moment: datetime) -> str:
    """``Mon, 02 Jan 2006 15:04:05 UTC`` (Go's http.TimeFormat with UTC), without locale-dependent strftime."""
    t = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    return (
        f"{_DAYS[t.weekday()]}, {t.day:02d} {_MONTHS[t.month - 1]} {t.year} "
        f"{t.hour:02d}:{t.minute:02d}:{t.second:02d} UTC"
    )


def http_date(epoch: float) -> str:
    """``rfc1123_utc`` of a Unix time. Every event in the same second gets the same reset time (a new key's
    window ends ``interval`` from now): the last few strings are remembered instead of formatted each time
    (issue 17, the ingest path)."""
    second = int(epoch // 1)
    text = _formatted.get(second)
    if text is None:
        if len(_formatted) >= 8:
            _formatted.clear()
        text = _formatted[second] = rfc1123_utc(datetime.fromtimestamp(second, UTC))
    return text


_formatted: dict[int, str] = {}  # Unix second → its text: a bounded cache


class _Bucket:
    __slots__ = ("last_seen", "start", "taken", "window")

    def __init__(self, start: float) -> None:
        self.start = start
        self.window = 0
        self.taken = 0
        self.last_seen = start


class FixedWindowLimiter:
    """``tokens`` requests per key per ``interval`` seconds, windows aligned to the key's first request."""

    def __init__(self, interval: float, clock: Clock, tokens: int = 1) -> None:
        if interval <= 0:
            raise ValueError("rate limit interval must be positive")
        self.interval = interval
        self.tokens = tokens
        self._clock = clock
        # the wall clock of the reset time: ``time.time`` itself for the system clock (``now()`` builds a
        # datetime per request), the injected clock's otherwise (tests)
        system = type(clock) is SystemClock
        self._wall: Callable[[], float] = time.time if system else lambda: clock.now().timestamp()
        self._monotonic: Callable[[], float] = time.monotonic if system else clock.monotonic
        self._buckets: dict[str, _Bucket] = {}
        self._next_sweep = clock.monotonic() + interval

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str) -> Decision:
        mono = self._monotonic()
        if mono >= self._next_sweep:
            self.sweep(mono)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(mono)
        window = int((mono - bucket.start) // self.interval)
        if window != bucket.window:
            bucket.window = window
            bucket.taken = 0
        bucket.last_seen = mono
        reset = self._wall() + (bucket.start + (window + 1) * self.interval - mono)
        if bucket.taken < self.tokens:
            bucket.taken += 1
            return Decision(True, self.tokens, self.tokens - bucket.taken, reset)
        return Decision(False, self.tokens, 0, reset)

    def sweep(self, mono: float | None = None) -> int:
        """Forget keys idle for more than 2× the interval. Returns how many were removed."""
        now = self._clock.monotonic() if mono is None else mono
        ttl = 2 * self.interval
        stale = [k for k, b in self._buckets.items() if now - b.last_seen > ttl]
        for key in stale:
            del self._buckets[key]
        self._next_sweep = now + self.interval
        return len(stale)

"""The retry decision, pure and separate from the loop (reference §4.0, retryablehttp's policy).

Retry on transport errors (but not a certificate refused, an unusable URL or a SOCKS proxy's refusal), on
429 and on status 0 or >= 500 except 501; never on other statuses. A transport error is one of the typed
``transport.TransportError`` classes, which carry their own verdict: nothing here looks at a class name.
The ``reason`` string labels the failure metric, so it is short and of low cardinality; ``failure`` is the
``FailureReason`` callers decide on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import FailureReason
from ..lib.retryafter import parse_retry_after
from .transport import TransportError


@dataclass(frozen=True, slots=True)
class Verdict:
    retry: bool
    reason: str
    failure: FailureReason
    retry_after: float | None = None


def classify_status(status: int, headers: Mapping[str, str] | None = None) -> Verdict:
    """An answer that is not 2xx. ``Retry-After`` is read on 429 and 503 (the statuses RFC 9110 gives it)."""
    reason = f"http_{status}"
    if status == 429:
        return Verdict(True, reason, FailureReason.RATE_LIMITED, _retry_after(headers))
    if status == 503:
        return Verdict(True, reason, FailureReason.SERVER_ERROR, _retry_after(headers))
    if status == 0 or (status >= 500 and status != 501):
        return Verdict(True, reason, FailureReason.SERVER_ERROR)
    if status >= 500:
        return Verdict(False, reason, FailureReason.SERVER_ERROR)
    return Verdict(False, reason, FailureReason.CLIENT_ERROR)


def classify_transport(exc: TransportError) -> Verdict:
    """A request that got no usable answer: the typed error says it all."""
    return Verdict(exc.retryable, exc.reason, exc.failure)


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    return parse_retry_after(headers.get("Retry-After")) if headers else None

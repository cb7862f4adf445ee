"""W3C Trace Context (``traceparent``): parsed and written here, without OpenTelemetry.

The pipeline carries a trace as the text of a ``traceparent`` header (``00-<trace id>-<span id>-<flags>``):
from the POST that brought the event, through the queue — the durable outbox stores it with the
notification (``dispatch/model.py: Notification.traceparent``) — to the delivery that continues it. Text,
because it must survive a store and a restart, and because the no-op tracer must not import the SDK to
carry it. The SDK (``otel.py``) turns the text into its own ``SpanContext`` only when tracing is on.

Parsing follows the W3C Recommendation (Trace Context Level 1, §3.2): version ``00`` is exactly 55
characters; a later version may be longer and is read by its first four fields; ``ff`` is invalid; the ids
are lowercase hex and not all zero. Anything else is ``None`` — a new trace starts, as the spec asks of a
receiver that cannot parse the header. The value comes from an unauthenticated client: it is looked at
only up to ``MAX_HEADER`` characters.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEADER = 512
"""Characters of a ``traceparent`` value looked at (version 00 needs 55; later versions may add fields)."""
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A parsed ``traceparent``: the trace, the parent span within it, and whether the caller sampled it."""

    trace_id: int
    span_id: int
    sampled: bool = True

    def header(self) -> str:
        """The version-00 header value (lowercase, 55 characters)."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"


def _hex(text: str) -> bool:
    return bool(text) and _HEX.issuperset(text)


def parse(value: str | None) -> TraceParent | None:
    """The ``traceparent`` in ``value``, or None when it is absent or not valid (see the module docstring)."""
    if not value or len(value) > MAX_HEADER:
        return None
    value = value.strip(" \t")
    if len(value) < 55:
        return None
    version, trace_id, span_id, flags = value[0:2], value[3:35], value[36:52], value[53:55]
    if value[2] != "-" or value[35] != "-" or value[52] != "-":
        return None
    if not (_hex(version) and _hex(trace_id) and _hex(span_id) and _hex(flags)) or version == "ff":
        return None
    if version == "00" and len(value) != 55:
        return None
    if len(value) > 55 and value[55] != "-":  # a later version: more fields after a dash
        return None
    trace, span = int(trace_id, 16), int(span_id, 16)
    if not trace or not span:
        return None
    return TraceParent(trace, span, bool(int(flags, 16) & 1))

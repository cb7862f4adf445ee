"""What the web UI and its JSON API read: one ``UIContext`` the composition root fills in (issue 27 item 3).

The UI listener is a window onto state other components own: the history of decisions (``history/``),
the object cache, the rows of ``/status``, the durable store's dead letters and lane statistics, and the
outbox's circuit breakers. The pages (``pages.py``) and the JSON API (``api.py``) take this one value, so
neither reaches into ``App`` and both show the same thing; ``app.py`` is the only place that builds it.

The functions below compute the overview once for both: each Provider's health (last success and failure
from the Reporter's ``ProviderHealth``, the breaker, the outbox depth and oldest age where a durable store exists), the dead letters (error text
masked when the store wrote it) and the Silences that are not expired.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ...api.silence import Matcher
from ...dispatch.providerhealth import ProviderHealth
from ...errors import StoreError
from ...history import History
from ...lib.clock import Clock, SystemClock
from ...objects.base import ObjectStore
from ...settings import Settings
from ...store.base import Store

log = logging.getLogger(__name__)

STORE_TIMEOUT = 2.0
"""Seconds a page waits for the durable store (dead letters, lane statistics) before it shows the rest
without them: a page must answer while the store is slow (a NATS leader election)."""

MAX_DEAD_LETTERS = 200
"""Dead letters the overview lists (newest first); the ``dead-letters`` command lists them all."""

MAX_STREAMS = 32
"""Live-stream (``/api/stream``) subscribers at once; one more is answered 503 (each holds a connection and a
bounded queue in the history's fan-out)."""


class StreamSlots:
    """A counter of live-stream subscribers: ``acquire()`` is False when all ``limit`` slots are taken (the
    handler answers 503), ``release()`` in the handler's ``finally``."""

    def __init__(self, limit: int = MAX_STREAMS) -> None:
        self.limit = limit
        self.taken = 0

    def acquire(self) -> bool:
        if self.taken >= self.limit:
            return False
        self.taken += 1
        return True

    def release(self) -> None:
        self.taken = max(0, self.taken - 1)


@dataclass(frozen=True)
class Actions:
    """What the UI may change when ``--ui-actions-token-file`` is given (read-only without it). The
    composition root supplies both, since they live above the server layer (local mode writes files the
    ``silence`` command wrote; a cluster patches the object)."""

    token: Callable[[], bytes]
    """The bearer token, read from the file on each call (a rotated Secret takes effect without a restart)."""
    replay: Callable[[str], Awaitable[bool]] | None = None
    """Put a dead letter back in the outbox by id; False when no such dead letter."""
    expire_silence: Callable[[str, str], Awaitable[str]] | None = None
    """Expire the Silence ``namespace/name`` now; the answer says what was done (raises ``UIActionError``)."""


class UIActionError(Exception):
    """An action could not be done; the message is shown to the user (no secret in it)."""


@dataclass
class UIContext:
    history: History | None
    """The history of decisions, or None with ``--history=false``."""
    objects: ObjectStore
    status: Callable[[], list[dict[str, Any]]]
    """The rows of ``/status`` (server/health.py ``status_rows``): kind, namespace, name, ready, reason,
    message (masked), suspended; a Silence's state, ends and held."""
    store: Store | None = None
    """The durable store (``--store=sqlite:…|nats://…``) for dead letters and lane statistics; None: memory."""
    health: ProviderHealth | None = None
    """Each Provider's last success and failure (the Reporter's, this replica's deliveries)."""
    breaker: Callable[[str], str | None] | None = None
    """Provider health: the circuit breaker state of a lane (``namespace/name``): closed, open, half-open,
    or None when this replica has no lane for it (durable stores only)."""
    settings: Settings = field(default_factory=Settings)
    clock: Clock = field(default_factory=SystemClock)
    actions: Actions | None = None
    """None: read-only (the default)."""
    streams: StreamSlots = field(default_factory=StreamSlots)
    """Live-stream subscribers (``/api/stream``), bounded."""
    allowed_hosts: Sequence[str] = ()
    """Host names (without port) a request may name besides the listener's own, 127.0.0.1 and localhost."""


async def _bounded(what: str, call: Awaitable[Any], default: Any) -> Any:
    try:
        async with asyncio.timeout(STORE_TIMEOUT):
            return await call
    except (StoreError, TimeoutError) as exc:
        log.debug("ui: %s unavailable: %s", what, exc or "no answer in time")
        return default


async def provider_health(ctx: UIContext) -> list[dict[str, Any]]:
    """One row per Provider: ``provider`` (namespace/name), ``type``, ``lastSuccess``/``lastFailure`` (epoch
    seconds or None), ``lastError`` (masked by the Reporter), ``breaker``, ``outboxDepth`` and ``oldestAge``
    (None without a durable store)."""
    stats: Mapping[str, Any] = {}
    if ctx.store is not None:
        stats = await _bounded("lane statistics", ctx.store.stats(), {})
    rows: list[dict[str, Any]] = []
    providers = sorted(ctx.objects.providers(), key=lambda p: (p.metadata.namespace, p.metadata.name))
    for provider in providers:
        key = f"{provider.metadata.namespace}/{provider.metadata.name}"
        lane = stats.get(key)
        row: dict[str, Any] = {
            "provider": key,
            "type": str(provider.spec.type),
            "lastSuccess": None,
            "lastFailure": None,
            "lastError": "",
            "breaker": (ctx.breaker(key) if ctx.breaker is not None else None),
            "outboxDepth": lane.depth if lane is not None else (0 if ctx.store is not None else None),
            "oldestAge": lane.oldest_age if lane is not None else (0.0 if ctx.store is not None else None),
        }
        state = ctx.health.get(key) if ctx.health is not None else None
        if state is not None:
            row.update(
                lastSuccess=state.last_success, lastFailure=state.last_failure, lastError=state.last_error
            )
        rows.append(row)
    return rows


async def dead_letters(ctx: UIContext) -> list[dict[str, Any]]:
    """The newest dead letters (at most ``MAX_DEAD_LETTERS``): id, provider, reason, error (masked when it
    was written), deadAt, attempts. Empty without a durable store."""
    if ctx.store is None:
        return []
    letters = await _bounded("dead letters", ctx.store.dead_letters(limit=MAX_DEAD_LETTERS), [])
    letters = sorted(letters, key=lambda d: d.dead_at, reverse=True)
    return [
        {
            "id": d.id,
            "provider": d.provider,
            "reason": d.reason,
            "error": d.error,
            "deadAt": d.dead_at,
            "attempts": d.attempts,
        }
        for d in letters
    ]


def silences(ctx: UIContext) -> list[dict[str, Any]]:
    """Silences that are not expired: namespace, name, state, ends, held, matchers (``key op value``
    strings), comment, createdBy."""
    out: list[dict[str, Any]] = []
    for silence in ctx.objects.silences():
        state = str(silence.status.state or "")
        if state == "Expired":
            continue
        spec = silence.spec
        out.append(
            {
                "namespace": silence.metadata.namespace,
                "name": silence.metadata.name,
                "state": state,
                "ends": _rfc3339(silence.status.ends_at or spec.ends_at),
                "held": silence.status.held or 0,
                "matchers": [_matcher_text(m) for m in spec.matchers],
                "comment": spec.comment or "",
                "createdBy": spec.created_by or "",
            }
        )
    out.sort(key=lambda s: (s["namespace"], s["name"]))
    return out


def _matcher_text(matcher: Matcher) -> str:
    return f"{matcher.name}{matcher.match_type.value}{matcher.value}"


def _rfc3339(when: datetime | None) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else ""
